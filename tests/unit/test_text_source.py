"""`data.source: text`: the LM on the user's documents, through a BPE trained on them
(data/text.py).

Every corpus is generated here, in tmp_path; every ELASTUNE_HOME (where tokenizers are cached) too.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from elastune.cli import main
from elastune.config import DataConfig
from elastune.data import text as text_source
from elastune.data.text import EOS, PAD, UNK, TextSource, text_tokenizer, tokenizer_file
from elastune.errors import ConfigError
from elastune.training.loop import train
from elastune.validate import load_run_config
from elastune.workloads import build_workload, lm
from tokenizers import Tokenizer

from tests.unit.test_table_source import _refused

LM = [
    "workload=lm",
    "workload_options={vocab: 300, context: 32, layers: 1, heads: 2}",
    "model.embedding_dim=32",
    "batch.micro=32",
    "eval.samples=256",
    "steps=6",
    "warmup_steps=1",
    "device=cpu",
]
SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "our teacher", "the bird"]
VERBS = ["sat on", "looked at", "ran to", "jumped over", "walked past", "sang to"]
OBJECTS = ["the mat", "a tree", "the house", "the river", "a small box", "the garden"]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ELASTUNE_HOME, and this process's memory of tokenizers and corpora emptied: each test
    starts from no cache at all."""
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(text_source, "_TOKENIZERS", {})
    monkeypatch.setattr(text_source, "_CORPORA", {})
    return tmp_path / "home"


def documents(n: int, seed: int = 0) -> list[str]:
    """Sentences of a small grammar (subject verb object.), 1 to 8 to a document; each document
    numbered, so that no two are the same."""
    rng = random.Random(seed)
    return [
        f"{i}: "
        + " ".join(
            f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}." for _ in range(rng.randint(1, 8))
        )
        for i in range(n)
    ]


def write_txt(path: Path, docs: list[str]) -> Path:
    path.write_text("".join(d + "\n" for d in docs))
    return path


def data_for(path: Path, **more: object) -> DataConfig:
    return DataConfig.model_validate({"source": "text", "path": str(path), **more})


def source(path: Path, eval_samples: int = 50, **more: object) -> TextSource:
    return TextSource(data_for(path, **more), vocab=300, context=32, eval_samples=eval_samples)


def forget() -> None:
    """This process's memory of tokenizers and corpora, emptied: the next use reads the disk cache."""
    text_source._TOKENIZERS.clear()
    text_source._CORPORA.clear()


def texts(src: TextSource, batch: object) -> list[str]:
    """Each sequence of a batch decoded, EOS dropped."""
    tokens, lengths = batch.tokens, batch.lengths  # type: ignore[attr-defined]
    return [src.tokenizer.decode(row[:n].tolist()) for row, n in zip(tokens, lengths, strict=True)]


# ---- the tokenizer ----------------------------------------------------------------------------


def test_the_tokenizer_is_deterministic_cached_and_rebuilt_when_the_file_changes(tmp_path: Path, home: Path) -> None:
    path = write_txt(tmp_path / "c.txt", documents(400))
    data = data_for(path)
    first = text_tokenizer(data, 300, 50).to_str()
    cached = tokenizer_file(data, 300, 50)
    assert cached.parent == home / "tokenizers" and json.loads(cached.read_text()) == json.loads(first)
    ids = cached.with_name(cached.stem + ".ids.npy")
    source(path)  # tokenizes the documents once, into the cache
    written = {f: (f.stat().st_ino, f.stat().st_mtime_ns) for f in (cached, ids)}
    # A process that finds the cache reads it: nothing is trained, tokenized or written again
    forget()
    assert text_tokenizer(data, 300, 50).to_str() == first and len(source(path).read(0, 5)) == 5
    assert {f: (f.stat().st_ino, f.stat().st_mtime_ns) for f in (cached, ids)} == written
    # Trained again from scratch: the same JSON, here and in another process on one thread
    cached.unlink()
    forget()
    assert text_tokenizer(data, 300, 50).to_str() == first
    probe = (
        "from elastune.config import DataConfig\n"
        "from elastune.data.text import text_tokenizer\n"
        f"print(text_tokenizer(DataConfig(source='text', path={str(path)!r}), 300, 50).to_str())"
    )
    env = {**os.environ, "ELASTUNE_HOME": str(tmp_path / "other"), "RAYON_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == first
    # A changed file is a new fingerprint: trained again, on the new text
    write_txt(path, [f"{i} zebras zigzag" for i in range(400)])
    changed = text_tokenizer(data_for(path), 300, 50)
    assert tokenizer_file(data_for(path), 300, 50) != cached
    assert "Ġzebras" in changed.get_vocab() and "Ġzebras" not in Tokenizer.from_str(first).get_vocab()
    # What else trains it is in the key too: the target size, the held-out count
    assert len({tokenizer_file(data_for(path), v, e) for v, e in [(300, 50), (400, 50), (300, 60)]}) == 3


def test_special_ids_are_fixed_and_text_that_spells_them_stays_text(tmp_path: Path) -> None:
    docs = [*documents(300), *(f"{i} the end <eos> of <pad> or <unk> text" for i in range(40))]
    src = source(write_txt(tmp_path / "c.txt", docs), eval_samples=50)
    tok = src.tokenizer
    assert [tok.token_to_id(t) for t in ("<pad>", "<unk>", "<eos>")] == [PAD, UNK, EOS] == [0, 1, 2]
    assert lm.PAD == PAD
    assert src.table_sizes == (tok.get_vocab_size(),) and tok.get_vocab_size() <= 300
    batch = src.read(0, src.train_sequences)
    for row, n in zip(batch.tokens, batch.lengths, strict=True):
        assert (row[: n - 1] > EOS).all() and (row[n:] == PAD).all()  # a special id only last: a document's EOS
    spelled = [t for t in texts(src, batch) if "<eos> of <pad>" in t]
    assert spelled, "documents that spell the special tokens are in the training sequences, as text"


# ---- the sequences ------------------------------------------------------------------------------


def test_reads_are_a_pure_function_of_position_and_wrap(tmp_path: Path) -> None:
    src = source(write_txt(tmp_path / "c.txt", documents(400)))
    whole = src.read(0, 10)
    parts = [src.read(0, 4), src.read(4, 6)]
    for field in ("tokens", "lengths"):
        assert torch.equal(getattr(whole, field), torch.cat([getattr(p, field) for p in parts]))
    n = src.train_sequences
    assert torch.equal(src.read(n - 2, 5).tokens, torch.cat([src.read(n - 2, 2).tokens, src.read(0, 3).tokens]))
    assert torch.equal(src.read(3 * n + 7, 4).tokens, src.read(7, 4).tokens)
    assert whole.tokens.shape == (10, 32) and whole.tokens.dtype == torch.int64
    assert whole.lengths.shape == (10,) and whole.lengths.dtype == torch.int64
    assert len(src.read(5, 0)) == 0
    # a fresh source over the same file gives the same stream; another data.seed another order of it
    forget()
    assert torch.equal(source(tmp_path / "c.txt").read(0, 10).tokens, whole.tokens)
    other = TextSource(data_for(tmp_path / "c.txt", seed=1), vocab=300, context=32, eval_samples=50)
    assert not torch.equal(other.read(0, 10).tokens, whole.tokens)
    assert sorted(texts(other, other.read(0, n))) == sorted(texts(src, src.read(0, n)))


def test_long_documents_are_cut_into_pieces_of_real_length(tmp_path: Path) -> None:
    path = write_txt(tmp_path / "c.txt", documents(300))
    tok = source(path, eval_samples=0, eval_path=str(write_txt(tmp_path / "e1.txt", ["a dog"]))).tokenizer
    trained = tokenizer_file(data_for(path), 300, 0).stat()
    # a document of 2 x 32 ids + 1, EOS included: two full pieces, and a last 1-id piece dropped
    long = "Q" * 64  # the corpus has no Q: never merged, one id each
    assert len(tok.encode(long).ids) == 64
    short = "a dog ran to the river."
    src = source(path, eval_samples=0, eval_path=str(write_txt(tmp_path / "e2.txt", [long, short])))
    after = tokenizer_file(data_for(path), 300, 0).stat()
    assert (after.st_ino, after.st_mtime_ns) == (trained.st_ino, trained.st_mtime_ns)  # not trained again
    batch = next(src.eval_batches(10, 10))
    lengths = batch.lengths.tolist()
    ids = [*tok.encode(long).ids, EOS]
    assert lengths == [32, 32, len(tok.encode(short).ids) + 1]
    assert batch.tokens[0].tolist() + batch.tokens[1].tolist() == ids[:64]  # ids[64] is the dropped EOS
    assert batch.tokens[2, lengths[2] - 1] == EOS and (batch.tokens[2, lengths[2] :] == PAD).all()
    train = src.read(0, src.train_sequences).lengths
    assert float(train.min()) >= 2 and float(train.max()) <= 32


def test_held_out_documents_are_never_trained_on_not_even_by_the_tokenizer(tmp_path: Path) -> None:
    docs = documents(600)
    k = 2  # max(2, 600 // 256)
    held = set(range(k - 1, len(docs), k)[:256])  # docs 1, 3, ..., 511
    for i in held:  # a word only held-out documents have: the tokenizer must not learn it
        docs[i] += " QQQQQQ QQQQQQ QQQQQQ"
    src = TextSource(data_for(write_txt(tmp_path / "c.txt", docs)), vocab=300, context=256, eval_samples=256)
    trained = texts(src, src.read(0, src.train_sequences))
    evaluated = [t for b in src.eval_batches(10_000, 100) for t in texts(src, b)]
    assert sorted(trained) == sorted(d for i, d in enumerate(docs) if i not in held)  # one piece each
    assert evaluated == [docs[i] for i in sorted(held)]  # in file order
    assert not [t for t in src.tokenizer.get_vocab() if "QQ" in t]
    assert [t for t in source(write_txt(tmp_path / "all.txt", docs), eval_samples=0).tokenizer.get_vocab() if "QQ" in t]


def test_json_lines_read_the_text_field_and_gzip_reads_the_same(tmp_path: Path) -> None:
    docs = documents(300)
    lines = [json.dumps({"id": i, "body": d, "text": 7}) for i, d in enumerate(docs)]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("\n".join(lines[:100]) + "\n\n" + "\n".join(lines[100:]) + "\n")  # a blank line is no document
    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as f:
        f.write(jsonl.read_text())
    with gzip.open(tmp_path / "c.txt.gz", "wt") as f:
        f.write("".join(d + "\r\n" for d in docs))  # CRLF line endings too
    want = source(write_txt(tmp_path / "c.txt", docs))
    for name in ("c.jsonl", "c.jsonl.gz", "c.txt.gz"):
        got = source(tmp_path / name, **({"text_field": "body"} if "jsonl" in name else {}))
        assert got.tokenizer.to_str() == want.tokenizer.to_str(), name
        assert torch.equal(got.read(0, 50).tokens, want.read(0, 50).tokens), name
    first = texts(want, next(want.eval_batches(1, 1)))[0]
    assert docs[5].startswith(first) and len(first) > 10  # every 6th document (300 // 50) is held out


# ---- bad input: DataError naming the file and the line, at validation, exit 2 -------------------


@pytest.mark.parametrize(
    ("name", "contents", "expected"),
    [
        ("e.txt", b"", ["has no documents"]),
        ("e.txt", b"\n  \n\t\n", ["has no documents"]),
        ("one.txt", b"a single document\n", ["has 1 document", "data.eval_path"]),
        ("few.txt", b"a\nb\n", ["gives 1 training sequence", "at least 2", "eval.samples"]),
        ("u.txt", b"fine\ncaf\xe9 latin-1\n", ["line 2", "not UTF-8"]),
        ("j.jsonl", b'{"text": "ok"}\nnot json\n', ["line 2", "not JSON"]),
        ("j.jsonl", b'{"text": "ok"}\n["a", "b"]\n', ["line 2", "is an array, not a JSON object"]),
        ("j.jsonl", b'{"text": "ok"}\n{"text": "ok"}\n{"body": "x"}\n', ["line 3", "no key 'text'", "'body'"]),
        ("j.jsonl", b'{"text": 12}\n', ["line 1", "'text' (data.text_field) is a number, not a string"]),
        ("j.jsonl", b'{"text": "a\\ud800b"}\n', ["line 1", "unpaired surrogate"]),
        ("g.txt.gz", b"not gzip at all\n", ["cannot be read"]),
    ],
    ids=[
        "empty",
        "blank",
        "one-doc",
        "one-sequence",
        "latin1",
        "not-json",
        "array",
        "no-key",
        "number",
        "surrogate",
        "bad-gzip",
    ],
)
def test_bad_files_are_config_errors_naming_file_and_line(
    tmp_path: Path, name: str, contents: bytes, expected: list[str]
) -> None:
    path = tmp_path / name
    path.write_bytes(contents)
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [*LM, "data.source=text", f"data.path={path}"])
    said = str(err.value)
    for text in [str(path), "data.path", *expected]:
        assert text in said, said


def test_an_empty_eval_file_and_files_past_the_size_bound_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = write_txt(tmp_path / "c.txt", documents(300))
    empty = tmp_path / "e.txt"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match=rf"{empty}: has no documents.*drop data.eval_path"):
        load_run_config(None, [*LM, "data.source=text", f"data.path={good}", f"data.eval_path={empty}"])
    monkeypatch.setattr(text_source, "MAX_TEXT_BYTES", 4096)  # the bound, scaled down to a test's files
    with pytest.raises(ConfigError, match=rf"{good}: is over the 4.00 KiB of text"):
        load_run_config(None, [*LM, "data.source=text", f"data.path={good}"])
    bomb = tmp_path / "b.txt.gz"  # small on disk, past the bound once decompressed
    with gzip.open(bomb, "wt") as f:
        f.write("the cat sat on the mat. " * 1000)
    assert bomb.stat().st_size < 4096
    with pytest.raises(ConfigError, match=rf"{bomb}: is over the 4.00 KiB of decompressed text"):
        load_run_config(None, [*LM, "data.source=text", f"data.path={bomb}"])


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["workload=dlrm"], ["data.source='text'", "workload=lm or hf, not workload='dlrm'"]),
        (["workload_options={vocab: 200}"], ["workload_options.vocab=200", "at least 259"]),
        (["data.text_field=body"], ["data.text_field='body'", "give a .jsonl file"]),
        (["data.text_field=a b"], ["data.text_field='a b'", "top-level JSON key"]),
        (["data.schema={label: y, categorical: [c]}"], ["data.schema", "data.source=table"]),
        (["data.skip_malformed=true"], ["data.skip_malformed", "stops at the first bad line"]),
        (["data.table_rows=[5]"], ["data.table_rows", "tokenizer's vocabulary"]),
    ],
)
def test_text_settings_that_cannot_work_are_config_errors(tmp_path: Path, sets: list[str], expected: list[str]) -> None:
    path = write_txt(tmp_path / "c.txt", documents(300))
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [*LM, "data.source=text", f"data.path={path}", *sets])
    for text in expected:
        assert text in str(err.value), str(err.value)


def test_the_lm_refuses_dlrm_sources_and_other_suffixes(tmp_path: Path) -> None:
    csv = tmp_path / "c.csv"
    csv.write_text("y,c\n1,a\n")
    with pytest.raises(ConfigError, match=r"data.path='.*c.csv': data.source=text reads plain text"):
        load_run_config(None, [*LM, "data.source=text", f"data.path={csv}"])
    table = [
        "data.source=table",
        f"data.path={csv}",
        f"data.eval_path={csv}",
        "data.schema={label: y, categorical: [c]}",
    ]
    with pytest.raises(ConfigError, match=r"data.source='table': workload lm reads synthetic text or your documents"):
        load_run_config(None, [*LM, *table])


# ---- end to end: it learns, the estimator prices the real table, the tokenizer is kept ----------


def test_the_lm_learns_a_corpus_and_the_table_has_the_tokenizers_size(tmp_path: Path) -> None:
    path = write_txt(tmp_path / "c.txt", documents(600))
    sets = [*LM, "data.source=text", f"data.path={path}", "steps=30", "optimizer.lr=0.01"]
    cfg = load_run_config(None, [*sets, "workload_options={vocab: 2000, context: 32, layers: 1, heads: 2}"])
    workload = build_workload(cfg)
    rows = text_tokenizer(cfg.data, 2000, 256).get_vocab_size()
    assert 259 < rows < 2000  # a small corpus runs out of pairs to merge before the target
    assert workload.table_sizes == (rows,) and workload.tables[0].rows == rows  # type: ignore[attr-defined]
    model = workload.build_model()
    assert model.embeddings.bag.weight.shape[0] == rows and model.output.weight.shape[0] == rows  # type: ignore[union-attr]
    result = train(cfg)
    # An untrained model's perplexity is about the table's rows (uniform over ~700); the grammar leaves
    # far less to guess (30 steps reach ~26, 40 steps ~15).
    assert result.quality_metric == "perplexity" and result.quality < rows / 10, (result.quality, rows)
    assert result.units == "tokens" and result.units_per_s is not None


def _sets(*items: str) -> list[str]:
    return [a for s in items for a in ("--set", s)]


def test_train_from_the_command_line_keeps_the_tokenizer_and_refuses_a_resume_on_changed_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_txt(tmp_path / "c.txt", documents(400))
    ckpt = tmp_path / "run.ckpt"
    sets = _sets(*LM, "data.source=text", f"data.path={path}", f"checkpoint.path={ckpt}", "checkpoint.resume=true")
    assert main(["train", "--format", "json", *sets]) == 0
    assert json.loads(capsys.readouterr().out)["quality_metric"] == "perplexity"
    kept = tmp_path / "run.ckpt.tokenizer.json"
    assert kept.read_text() == text_tokenizer(data_for(path), 300, 256).to_str()
    assert Tokenizer.from_file(str(kept)).token_to_id("<eos>") == EOS  # a server loads it as it is
    assert main(["train", "--format", "json", *sets, "--set", "steps=8"]) == 0  # the same text: resumes
    capsys.readouterr()
    write_txt(path, [*documents(400, seed=9), "zebras quizzically zigzag " * 20])  # new text: a new tokenizer
    _refused(capsys, ["train", *sets], "checkpoint.path", "run.ckpt.tokenizer.json", "tokenize to other ids")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"txt": "typo"}\n')
    _refused(capsys, ["train", *_sets(*LM, "data.source=text", f"data.path={bad}")], str(bad), "line 2", "'text'")


def test_the_sweep_parent_run_holds_the_tokenizer(tmp_path: Path) -> None:
    from elastune.tracking.mlflow import SweepTracker
    from elastune.tracking.records import SweepRecord
    from mlflow import MlflowClient

    path = write_txt(tmp_path / "c.txt", documents(300))
    base = {
        "workload": "lm",
        "workload_options": {"vocab": 280, "context": 32},
        "data": {"source": "text", "path": str(path)},
        "eval": {"samples": 256},
    }
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    record = SweepRecord(sweep_id="s-text", spec={"name": "s", "base": base}, status="running", started_at=time.time())
    run_id = SweepTracker(uri).start_sweep(record)
    local = MlflowClient(uri).download_artifacts(run_id, "tokenizer/tokenizer.json", str(tmp_path))
    logged = Path(local).read_text()
    assert logged == text_tokenizer(data_for(path), 280, 256).to_str()
    assert Tokenizer.from_file(local).get_vocab_size() <= 280
