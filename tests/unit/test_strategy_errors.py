"""Bad embedding-strategy parameters get the config layer's errors: the field, the value, the fix;
through the CLI, exit code 2 and nothing run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from elastune.cli import main
from elastune.data.clicks import table_sizes
from elastune.embeddings.fbgemm import fbgemm_import_error
from elastune.errors import ConfigError
from elastune.validate import load_run_config

from tests.conftest import TINY

needs_fbgemm = pytest.mark.skipif(fbgemm_import_error() is not None, reason=f"fbgemm_gpu {fbgemm_import_error()}")


def problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_run_config(None, [*TINY, *overrides])
    return [str(p) for p in caught.value.problems]


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.mark.parametrize("buckets", [0, -3])
def test_buckets_must_be_positive(buckets: int) -> None:
    assert problems("embedding.strategy=hashed", f"embedding.buckets={buckets}") == [
        f"embedding.buckets={buckets}: must be ≥ 1"
    ]


def test_a_cache_larger_than_the_tables_names_the_limit() -> None:
    total = sum(table_sizes(0.0005))
    found = problems("embedding.strategy=cached", "optimizer.sparse=sgd", f"embedding.cache_rows={total + 1}")
    assert len(found) == 1
    assert f"embedding.cache_rows={total + 1} is more than the {total} rows" in found[0]
    assert f"set it to at most {total}" in found[0]
    # the limit itself is fine
    load_run_config(None, [*TINY, "embedding.strategy=cached", "optimizer.sparse=sgd", f"embedding.cache_rows={total}"])


def test_an_unknown_dtype_lists_the_known_ones() -> None:
    (found,) = problems("embedding.strategy=half", "optimizer.sparse=sgd", "embedding.dtype=fp8")
    assert found.startswith("embedding.dtype='fp8': must be one of")
    assert "'fp16'" in found and "'bf16'" in found


def test_an_unknown_backend_lists_the_known_ones() -> None:
    (found,) = problems("embedding.backend=tpu")
    assert found.startswith("embedding.backend='tpu': must be one of") and "'fbgemm'" in found


@needs_fbgemm
def test_fbgemm_refuses_what_its_kernels_cannot_do() -> None:
    (strategy,) = problems("embedding.backend=fbgemm", "embedding.strategy=int8", "optimizer.sparse=sgd")
    assert strategy.startswith("embedding.backend='fbgemm': no fbgemm kernels for embedding.strategy='int8'")
    assert "full, half" in strategy and "embedding.backend=torch" in strategy
    (dtype,) = problems(
        "embedding.backend=fbgemm", "embedding.strategy=half", "embedding.dtype=bf16", "optimizer.sparse=sgd"
    )
    assert "embedding.dtype='bf16'" in dtype and "embedding.dtype=fp16" in dtype
    found = problems("embedding.backend=fbgemm", "optimizer.sparse=adam", "precision=fp16", "batch.accum=2")
    assert len(found) == 3, found  # every problem at once, one line each
    assert "optimizer.sparse=adam" in found[0] and "rowwise_adagrad" in found[0]
    assert "precision=fp16" in found[1] and "batch.accum=2" in found[2]


@needs_fbgemm
def test_fbgemm_accepts_what_it_supports() -> None:
    for strategy in ("full", "half"):
        for opt in ("sgd", "adagrad", "rowwise_adagrad"):
            cfg = load_run_config(
                None, [*TINY, "embedding.backend=fbgemm", f"embedding.strategy={strategy}", f"optimizer.sparse={opt}"]
            )
            assert cfg.embedding.backend == "fbgemm"


def test_fbgemm_not_installed_says_how_to_install() -> None:
    # A real interpreter in which fbgemm_gpu cannot be imported (None in sys.modules blocks it), going
    # through the CLI: exit 2, the install hint, and no checkpoint written.
    script = textwrap.dedent(
        """
        import sys
        sys.modules["fbgemm_gpu"] = None
        from elastune.cli import main
        sys.exit(main(sys.argv[1:]))
        """
    )
    args = ["train", *sets(*TINY, "embedding.backend=fbgemm", "optimizer.sparse=sgd")]
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    err = " ".join(done.stderr.split())  # the CLI wraps long lines
    assert "embedding.backend='fbgemm': fbgemm_gpu not installed" in err
    assert "pip install 'elastune[fbgemm]' or use embedding.backend=torch" in err
    assert done.stdout == ""


def test_the_cli_exits_2_on_bad_strategy_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    bad_fields = sets(*TINY, "embedding.strategy=hashed", "embedding.dtype=int4", "embedding.buckets=0")
    assert main(["train", *bad_fields]) == 2
    err = " ".join(capsys.readouterr().err.split())  # the CLI wraps long lines
    assert "2 problem(s)" in err
    assert "embedding.buckets=0: must be ≥ 1" in err
    assert "embedding.dtype='int4': must be one of" in err

    total = sum(table_sizes(0.0005))
    too_big = sets(*TINY, "embedding.strategy=cached", "optimizer.sparse=sgd", f"embedding.cache_rows={10 * total}")
    assert main(["estimate", *too_big]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"embedding.cache_rows={10 * total} is more than the {total} rows" in err
