"""What an LM on the user's own text says about it (issue 37, point 4): the documents, held-out
documents, tokens and vocabulary it trains on, printed when the run starts, and a warning after
eval when the model does worse than guessing uniformly over its vocabulary.

The expected counts are computed here from the file each test writes, by the rules data/text.py's
docstring states (a non-blank line is a document; every k-th held out, k = max(2, documents //
eval.samples); each document's ids end in EOS), with the tokenizer the run cached.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest
from elastune.cli import main
from elastune.data import text as text_source
from elastune.data.text import TextStats
from elastune.workloads.quality import unlearned_warning
from tokenizers import Tokenizer

from tests.unit.test_text_source import LM, documents, write_txt

CONTEXT = 32  # LM's workload_options.context
EVAL_SAMPLES = 256  # LM's eval.samples (its lowest allowed value)


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ELASTUNE_HOME (where the tokenizer is cached), and this process's caches emptied."""
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(text_source, "_TOKENIZERS", {})
    monkeypatch.setattr(text_source, "_CORPORA", {})
    monkeypatch.setattr(text_source, "_ANNOUNCED", set())
    return tmp_path / "home"


def _train(capsys: pytest.CaptureFixture[str], *sets: str) -> tuple[dict[str, object], str]:
    """`elastune train --format json` with the LM's tiny config and `sets`: (its JSON, its stderr)."""
    args = [a for s in [*LM, *sets] for a in ("--set", s)]
    assert main(["train", "--format", "json", *args]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def _number(text: str, pattern: str) -> int:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in {text!r}"
    return int(found[1].replace(",", ""))


def _counted(tokenizer: Tokenizer, docs: list[str]) -> tuple[int, int]:
    """(ids, sequences of at least 2 ids) of `docs`: each one's tokens and its EOS, cut into pieces of
    CONTEXT (a last piece of 1 id is dropped)."""
    lengths = [len(tokenizer.encode(d, add_special_tokens=False).ids) + 1 for d in docs]
    return sum(lengths), sum(math.ceil(n / CONTEXT) - (n % CONTEXT == 1) for n in lengths)


def test_the_run_says_what_text_it_trains_on(tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [*documents(40)]
    lines[3:3] = ["", "   "]  # blank lines are no documents
    path = write_txt(tmp_path / "notes.txt", lines)
    result, err = _train(capsys, "data.source=text", f"data.path={path}", f"eval.samples={EVAL_SAMPLES}")

    docs = [line for line in path.read_text().splitlines() if line.strip()]
    k = max(2, len(docs) // EVAL_SAMPLES)
    held = [i for i in range(len(docs)) if i % k == k - 1][:EVAL_SAMPLES]
    trained = [d for i, d in enumerate(docs) if i not in held]
    (tokenizer_path,) = (home / "tokenizers").glob("*.json")
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    train_tokens, sequences = _counted(tokenizer, trained)
    held_tokens, _ = _counted(tokenizer, [docs[i] for i in held])

    report = [line for line in err.splitlines() if line.startswith(("text data:", "  tokens:"))]
    assert len(report) == 2, err  # once, though validation, the loop and the estimator each build the source
    first, second = report
    assert _number(first, r"([\d,]+) documents in notes\.txt") == len(docs) == 40
    assert _number(first, r"([\d,]+) held out for eval") == len(held) == 20
    assert _number(first, r"([\d,]+) to train on") == len(trained)
    assert "every 2nd document" in first and "a lower eval.samples" in first  # half of them never train
    assert _number(second, r"tokens: ([\d,]+) to train on") == train_tokens
    assert _number(second, r"\(([\d,]+) sequences of at most 32\)") == sequences
    assert _number(second, r"([\d,]+) held out") == held_tokens
    assert _number(second, r"vocabulary: ([\d,]+) ids") == tokenizer.get_vocab_size()
    assert result["metrics"]["baseline_perplexity"] == tokenizer.get_vocab_size()  # type: ignore[index]


def test_with_an_eval_file_every_document_of_the_path_trains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_txt(tmp_path / "train.txt", documents(30))
    held = write_txt(tmp_path / "held.txt", documents(7, seed=1))
    _, err = _train(capsys, "data.source=text", f"data.path={path}", f"data.eval_path={held}")
    first = next(line for line in err.splitlines() if line.startswith("text data:"))
    assert _number(first, r"([\d,]+) documents in train\.txt to train on") == 30
    assert _number(first, r"([\d,]+) held out in held\.txt \(data\.eval_path\)") == 7


def test_a_model_that_memorized_tiny_text_is_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Twenty documents of random letters, half of them held out, trained on for 80 steps: the model
    learns its ten training documents by heart and guesses the held-out ones worse than uniformly."""
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(400)]
    path = write_txt(tmp_path / "tiny.txt", [" ".join(rng.sample(words, 12)) for _ in range(20)])
    result, err = _train(
        capsys, "data.source=text", f"data.path={path}", "steps=80", "optimizer.lr=0.01", "warmup_steps=1"
    )
    metrics = result["metrics"]
    assert metrics["perplexity"] > metrics["baseline_perplexity"]  # type: ignore[index]
    (warning,) = [line for line in err.splitlines() if line.startswith("warning:")]
    assert "worse than guessing uniformly" in warning and "memorized" in warning, warning


def test_a_model_that_learned_is_not_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A grammar's sentences, 600 documents, 30 steps: perplexity far under the vocabulary's size
    (test_text_source.py), and no warning."""
    path = write_txt(tmp_path / "c.txt", documents(600))
    result, err = _train(capsys, "data.source=text", f"data.path={path}", "steps=30", "optimizer.lr=0.01")
    metrics = result["metrics"]
    assert metrics["perplexity"] < metrics["baseline_perplexity"]  # type: ignore[index]
    assert "warning:" not in err, err


# ---- the warning's trigger and the stats lines, by hand -------------------------------------


def test_the_warning_names_the_numbers_and_the_cause() -> None:
    # the run: 2,993 ids, eval perplexity 12,044, train loss 0.37
    warning = unlearned_warning({"perplexity": 12044.0, "baseline_perplexity": 2993.0, "loss": 9.396}, 0.37)
    assert warning is not None
    assert "eval perplexity 12,044 is above 2,993" in warning and "worse than guessing uniformly" in warning
    assert "memorized" in warning and "train loss 0.37 vs eval loss 9.40" in warning
    assert "more text" in warning and "fewer steps" in warning
    # above uniform with a training loss as high: it did not fit at all
    underfit = unlearned_warning({"perplexity": 5400.0, "baseline_perplexity": 2993.0, "loss": 8.59}, 8.5)
    assert underfit is not None and "did not fit" in underfit and "optimizer.lr" in underfit
    # no eval loss among the metrics: log(perplexity) stands in for it
    assert "eval loss 9.40" in (unlearned_warning({"perplexity": 12044.0, "baseline_perplexity": 2993.0}, 0.37) or "")


@pytest.mark.parametrize(
    "metrics",
    [
        {"perplexity": 2000.0, "baseline_perplexity": 2993.0, "loss": 7.6},  # learned something
        {"perplexity": 2993.0, "baseline_perplexity": 2993.0, "loss": 8.0},  # exactly uniform: not worse
        {"perplexity": math.nan, "baseline_perplexity": 2993.0, "loss": math.nan},  # diverged: not judged here
        {"logloss": 0.9, "auc": 0.5, "baseline_logloss": 0.6},  # no perplexity baseline (DLRM)
        {"perplexity": 12044.0, "loss": 9.4},  # no baseline to compare with
    ],
)
def test_no_warning_where_it_learned_or_cannot_be_told(metrics: dict[str, float]) -> None:
    assert unlearned_warning(metrics, 0.37) is None


def _stats(**changes: object) -> TextStats:
    given: dict[str, object] = {
        "path": Path("/data/corpus.txt"),
        "eval_path": None,
        "documents": 730,
        "held_out": 365,
        "every": 2,
        "eval_samples": 2048,
        "train_tokens": 41_230,
        "held_out_tokens": 40_876,
        "train_sequences": 812,
        "context": 128,
        "vocab": 2993,
        "target_vocab": 4096,
    }
    return TextStats(**{**given, **changes})  # type: ignore[arg-type]


def test_the_stats_lines_by_hand() -> None:
    first, second = _stats().lines()
    assert first == (
        "text data: 730 documents in corpus.txt: 365 held out for eval (every 2nd document, at most "
        "eval.samples=2,048; a lower eval.samples or a data.eval_path leaves more to train on), 365 to train on"
    )
    assert second == (
        "  tokens: 41,230 to train on (812 sequences of at most 128), 40,876 held out; vocabulary: 2,993 ids "
        "(below workload_options.vocab=4,096: the text ran out of pairs to merge)"
    )
    # a quarter held out is not flagged, more is; a vocabulary at its target says nothing of it
    assert "a lower eval.samples" not in _stats(documents=8, held_out=2, every=4).lines()[0]
    assert "a lower eval.samples" in _stats(documents=8, held_out=3, every=2).lines()[0]
    assert "every 11th document" in _stats(every=11).lines()[0] and "every 3rd" in _stats(every=3).lines()[0]
    assert "below" not in _stats(vocab=4096).lines()[1]
    with_file = _stats(eval_path=Path("/data/held.txt"), held_out=120, every=0, eval_samples=0).lines()[0]
    assert with_file == "text data: 730 documents in corpus.txt to train on, 120 held out in held.txt (data.eval_path)"
