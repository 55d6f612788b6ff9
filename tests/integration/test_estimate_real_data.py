"""The memory estimator on a real tabular file read through the Criteo TSV reader.

A user's real dataset, converted to Criteo's TSV, was predicted 22-27% under the peak `elastune
train` measured on the default CPU probe, where the synthetic stream is predicted within a few
percent: the reader's host memory (pyarrow's first use, the text it reads ahead, the parsed and
converted block) was in neither the trace nor the heap model (memory/data_stream.py). Here the
public kr-vs-kp chess dataset (tests/data/kr_vs_kp/README.md) is converted the same way and trained
on in a fresh process, as bench/estimator.py measures. This config measured 174.6-177.9 MiB in five
runs: predicted 137.2 MiB without the reader's term (21-23% under), 192.7 MiB with it (8-10% over).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from elastune.memory.data_stream import reader_bytes
from elastune.memory.estimate import estimate
from elastune.validate import load_run_config

pytestmark = pytest.mark.integration

KR_VS_KP = Path(__file__).parents[1] / "data" / "kr_vs_kp" / "kr-vs-kp.arff.gz"
_ATTRIBUTE = re.compile(r"@attribute\s+'([^']+)'\s+\{(.*)\}", re.IGNORECASE)


def criteo_tsv(arff: Path) -> str:
    """kr-vs-kp's rows as Criteo TSV lines (the mapping: tests/data/kr_vs_kp/README.md)."""
    names: list[str] = []
    values: list[list[str]] = []
    lines = []
    with gzip.open(arff, "rt") as f:
        for line in f:
            line = line.strip()
            if match := _ATTRIBUTE.match(line):
                names.append(match[1])
                values.append([v.strip().strip("'") for v in match[2].split(",")])
            elif line and line[0] not in "%@":
                row = [v.strip("'") for v in line.split(",")]
                label = "1" if row[-1] == "won" else "0"
                counts = [str(values[j].index(row[j])) for j in range(13)]
                ids = [f"{zlib.crc32(f'{names[j]}={row[j]}'.encode()):08x}" for j in range(13, 36)]
                lines.append("\t".join([label, *counts, *ids, "", "", ""]) + "\n")
    return "".join(lines)


@pytest.fixture(scope="module")
def kr_vs_kp_tsv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    text = criteo_tsv(KR_VS_KP)
    assert text.count("\n") == 3196 and sum(line[0] == "1" for line in text.splitlines()) == 1669
    path = tmp_path_factory.mktemp("kr_vs_kp") / "kr-vs-kp.tsv"
    path.write_text(text)
    return path


def test_a_real_file_through_the_criteo_reader_is_predicted_within_15_percent(kr_vs_kp_tsv: Path) -> None:
    args = [
        "data.source=criteo_tsv",
        f"data.path={kr_vs_kp_tsv}",
        "eval.samples=1024",  # held out of the 3,196 rows; training wraps around the other 2,172
        "steps=3",
        "warmup_steps=1",
        "device=cpu",
    ]
    cmd = [sys.executable, "-m", "elastune.cli", "train", "--format", "json"]
    for a in args:
        cmd += ["--set", a]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    measured = json.loads(done.stdout)["peak_memory_bytes"]
    cfg = load_run_config(None, args)
    est = estimate(cfg)
    assert est.overhead["data_reader"] == reader_bytes(cfg) > 0  # the reader's term is part of the prediction
    assert abs(est.peak_bytes - measured) / measured < 0.15, (est.peak_bytes, measured)
