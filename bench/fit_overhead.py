"""Refit the estimator's constants on the zoo's fit half only, from the zoo's records, and score
the held-out half under them.

bench/estimator.py --suite zoo measures twelve workloads, split in two halves fixed before any
refit (ZOO_FIT, ZOO_HELD_OUT). This script reads the measured peaks of a CPU-probe record and a
virtual-device record of that suite, traces each config again with the code checked out (the trace
is deterministic: what the overhead model reads from it is the same as when the record was made, or
newer), and fits, on the fit half's configs only:

- the CPU heap model (`CPU_FIT` in platform/elastune/memory/overhead.py): minimises the squared
  relative error, a grid over the activation share (it sits inside a max) and linear least squares
  for the other four coefficients at each point;
- the virtual device's model (`VIRTUAL_FIT`): what the device holds beyond the traced tensors, in
  bytes, is a runtime plus a share of the small blocks (under its 256 KiB mmap threshold) a training
  step makes, whose churn glibc's heap keeps in part; least squares of the fit half's residuals on
  [1, churn], each weighted by 1 / its measured peak, so that it minimises the squared relative
  error as the CPU fit does and as the targets are stated (in bytes, the large configs outweighed the
  small ones, whose error a constant term moves most); churn capped at the most the fit half made
  (the cap is the fit half's range: past it nothing was fitted); oneDNN's primitive cache (6 MiB,
  measured by switching the cache off) is taken as measured, not fitted;
- the screening margins (`SCREEN_MARGIN`): the most a fit-half config was measured above its
  refitted prediction, as a factor. A sweep screens proposals with prediction x margin.

A CUDA record of the zoo (bench/gpu.sh's `estimator` step on a GPU machine) is scored as it was
predicted there: the CUDA model's replay of the caching allocator runs only where CUDA does, so its
terms are not refitted here; its screening margin is fitted on the fit half the same way, and its
held-out half scored against ±10%. Without such a record the CUDA lines say so and nothing else.

Then it scores both halves under the refitted constants: the held-out half's figures are a result
(the constants never saw those workloads), the fit half's are a fit. Where a `--suite zoo_check`
record of the virtual device exists (configs in neither half, named before the small-block term
was fitted), its configs are scored apart as well, and so are those of a `--suite zoo_blind` record
(one config per workload, named before the relative-error weighting above was measured on them).
`--record` writes them as a record (estimator-zoo-refit); `elastune estimate` quotes the held-out
figures as the error to expect on a workload of one's own (`HELD_OUT` in overhead.py).

    python bench/fit_overhead.py                       # the newest zoo record of each probe
    python bench/fit_overhead.py --cpu A.json --virtual B.json --record
    python bench/fit_overhead.py --probes cuda         # after a GPU run: the CUDA margin and scores

Paste the printed constants into overhead.py. The records' measurements do not depend on the
constants, so re-scoring them is exact; a fresh zoo run is the check on new measurements.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from elastune.memory.overhead import (
    CPU_FIT,
    VIRTUAL_FIT,
    VIRTUAL_ONEDNN,
    CpuFit,
    CpuInputs,
    VirtualFit,
    cpu_inputs,
    cpu_other,
    onednn_matmuls,
    virtual_other_parts,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from estimator import EXTRA_SETS, EXTRA_SUITES, ZOO_CONFIGS, ZOO_FIT, ZOO_HELD_OUT, _run
from record import RECORDS, Figure, write_record

_MiB = 2**20
BANDS = {"cpu": 0.15, "virtual": 0.10, "cuda": 0.10}  # the estimator's targets per probe (±15% CPU, ±10% others)
SHARES = {"cpu": 0.80, "virtual": 0.90, "cuda": 0.90}  # ... for at least this share of the held-out configs
KINDS = {"cpu": "cpu_rss_hwm", "virtual": "virtual", "cuda": "cuda_reserved"}  # SCREEN_MARGIN's, HELD_OUT's keys


@dataclass(frozen=True)
class Row:
    """One zoo config: what was measured, and what the overhead model reads from its trace."""

    label: str
    workload: str
    measured: float  # bytes
    inputs: CpuInputs
    onednn: bool  # bf16 / fp16 matmuls run through oneDNN on this CPU
    churn: int = 0  # bytes of small blocks (under the virtual device's mmap threshold) a training step makes


@dataclass(frozen=True)
class Recorded:
    """One zoo config of a CUDA record: measured and predicted on the GPU machine, in bytes."""

    label: str
    workload: str
    measured: float
    predicted: float


def _by_date(pattern: str) -> list[Path]:
    """Oldest first: by the record's date, then by its name, whose NAME-YYYYMMDD-HHMMSS part orders
    the records of one day (a date alone ties them all)."""
    return sorted(RECORDS.glob(pattern), key=lambda p: (json.loads(p.read_text())["date"], p.name))


def newest_extra(name: str) -> Path | None:
    """The newest `--suite zoo_check` (name "check") or `--suite zoo_blind` ("blind") record of the
    virtual device, if any."""
    paths = _by_date(f"estimator-zoo_{name}-virtual-*.json")
    return paths[-1] if paths else None


def newest(probe: str) -> Path | None:
    """The newest zoo record of `probe`; None for CUDA where there is none (it needs a GPU machine)."""
    paths = _by_date(f"estimator-zoo-{probe}-*.json")
    if not paths and probe == "cuda":
        return None
    if not paths:
        flag = " --probe virtual" if probe == "virtual" else ""
        raise SystemExit(f"no estimator-zoo-{probe} record: run bench/estimator.py --suite zoo{flag} first")
    return paths[-1]


def _zoo_record(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text())
    if record["settings"].get("fit_set") != list(ZOO_FIT):
        raise SystemExit(f"{path.name}: its fit set is not bench/estimator.py's ZOO_FIT; the halves never move")
    return record


def recorded_rows(path: Path) -> list[Recorded]:
    """A CUDA record's configs with the predictions made where they were measured."""
    record = _zoo_record(path)
    columns = record["table"]["columns"]
    rows = []
    for cells in record["table"]["rows"]:
        cell = dict(zip(columns, cells, strict=True))
        label = cell["config"].rsplit(" (", 1)[0]
        inputs = cell.get("heap model inputs") or {}
        measured = inputs.get("measured") or cell["measured MiB"] * _MiB
        rows.append(Recorded(label, label.split(":")[0], float(measured), float(cell["predicted MiB"]) * _MiB))
    return rows


def rows_of(path: Path) -> list[Row]:
    """The record's configs, each traced again from the benchmark's own overrides."""
    from elastune.memory.trace import trace
    from elastune.validate import load_run_config

    record = _zoo_record(path)
    overrides = dict(ZOO_CONFIGS) | {label: o for configs, _ in EXTRA_SUITES.values() for label, o in configs}
    columns = record["table"]["columns"]
    rows = []
    for cells in record["table"]["rows"]:
        cell = dict(zip(columns, cells, strict=True))
        label = cell["config"].rsplit(" (", 1)[0]  # "dlrm: default (fit)"
        inputs = cell.get("heap model inputs") or {}
        measured = inputs.get("measured") or cell["measured MiB"] * _MiB  # bytes where recorded
        cfg = load_run_config(None, _run("cpu") + overrides[label])
        tracker = trace(cfg)
        inputs = cpu_inputs(cfg, tracker)
        churn = tracker.small_block_churn()
        rows.append(Row(label, label.split(":")[0], float(measured), inputs, onednn_matmuls(cfg), churn))
    return rows


def fit_cpu(rows: list[Row]) -> CpuFit:
    measured = np.array([r.measured for r in rows])
    best: tuple[float, CpuFit] | None = None
    for share in np.arange(0.0, 1.51, 0.01):
        # other = fixed + row_optimizer*[row] + holes(share) + traced_share*traced + gradient_share*grads
        xs = [r.inputs for r in rows]
        holes = np.array([max(x.traced, x.train_peak + share * x.heap_activations) - x.traced for x in xs])
        design = np.array([[1.0, float(x.row_optimizer), x.traced, x.heap_gradients] for x in xs])
        target = measured - np.array([x.traced for x in xs]) - holes
        weights = 1 / measured  # relative error
        coef, *_ = np.linalg.lstsq(design * weights[:, None], target * weights, rcond=None)
        candidate = CpuFit(
            fixed=float(coef[0]),
            row_optimizer=float(coef[1]),
            activation_share=round(float(share), 2),
            traced_share=float(coef[2]),
            gradient_share=float(coef[3]),
        )
        loss = float(np.sum((predict_cpu(rows, candidate) / measured - 1) ** 2))
        if best is None or loss < best[0]:
            best = (loss, candidate)
    assert best is not None
    return best[1]


def fit_virtual(rows: list[Row]) -> VirtualFit:
    cap = float(max(r.churn for r in rows))
    weight = np.array([1.0 / r.measured for r in rows])  # squared relative error, not bytes
    design = np.array([[1.0, min(r.churn, cap)] for r in rows]) * weight[:, None]
    residual = np.array([r.measured - r.inputs.traced - VIRTUAL_ONEDNN * r.onednn for r in rows]) * weight
    (runtime, share), *_ = np.linalg.lstsq(design, residual, rcond=None)
    return VirtualFit(runtime=float(runtime), churn_share=float(share), churn_cap=cap)


def predict_cpu(rows: list[Row], fit: CpuFit) -> np.ndarray:
    return np.array([r.inputs.traced + cpu_other(r.inputs, fit) for r in rows], dtype=float)


def predict_virtual(rows: list[Row], fit: VirtualFit) -> np.ndarray:
    return np.array(
        [r.inputs.traced + sum(virtual_other_parts(r.churn, fit).values()) + VIRTUAL_ONEDNN * r.onednn for r in rows],
        dtype=float,
    )


def margin(rows: list[Row] | list[Recorded], predicted: np.ndarray) -> float:
    """The most a config was measured above its prediction, as a factor (at least 1)."""
    return max(1.0, float(np.max(np.array([r.measured for r in rows]) / predicted)))


def score(rows: list[Row] | list[Recorded], predicted: np.ndarray, probe: str, bound: float) -> dict[str, Any]:
    errors = predicted / np.array([r.measured for r in rows]) - 1
    band = BANDS[probe]
    paired = list(zip(rows, predicted, errors, strict=True))
    under = [(r.label, float(e)) for r, pr, e in paired if r.measured > 1.1 * pr]
    over_bound = [r.label for r, pr, _ in paired if r.measured > pr * bound]
    return {
        "configs": len(rows),
        "within": int(np.sum(np.abs(errors) <= band)),
        "band": band,
        "median": float(statistics.median(np.abs(errors))),
        "under": under,
        "worst_under": float(min(0.0, np.min(errors))),
        "over_bound": over_bound,
        "errors": {r.label: float(e) for r, e in zip(rows, errors, strict=True)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", type=Path, help="estimator-zoo-cpu record (default: the newest)")
    parser.add_argument("--virtual", type=Path, help="estimator-zoo-virtual record (default: the newest)")
    parser.add_argument("--cuda", type=Path, help="estimator-zoo-cuda record (default: the newest, if there is one)")
    parser.add_argument(
        "--probes",
        default="cpu,virtual,cuda",
        help="which probes to refit and score (default: all three; CUDA where a record of it exists)",
    )
    parser.add_argument("--record", action="store_true", help="write the scores as a record (estimator-zoo-refit)")
    from record import add_arguments, refuse_dirty

    add_arguments(parser)
    args = parser.parse_args()
    if args.record and not {"cpu", "virtual"} <= set(args.probes.split(",")):
        # RESULTS.md shows the newest refit record: one without a probe would drop that probe's figures
        raise SystemExit("--record: a refit record holds the CPU and virtual figures; leave --probes out")
    refuse_dirty(args.allow_dirty or not args.record)
    given = {"cpu": args.cpu, "virtual": args.virtual, "cuda": args.cuda}
    sources: dict[str, Path] = {}
    for probe in args.probes.split(","):
        if probe not in KINDS:
            raise SystemExit(f"--probes: {probe!r} is not a probe; choose from {','.join(KINDS)}")
        path = given[probe] or newest(probe)
        if path is None:
            print("\ncuda: no estimator-zoo-cuda record (made on a GPU machine by bench/gpu.sh); not scored")
            continue
        sources[probe] = path
    results: dict[str, dict[str, Any]] = {}
    constants: dict[str, Any] = {}
    for probe, path in list(sources.items()):
        if probe == "cuda":
            scored = score_recorded(path)
            if scored is None:
                del sources[probe]
                continue
            results[probe], constants[probe] = scored
            _print(probe, path, results[probe], constants[probe][1], sources)
            continue
        rows = rows_of(path)
        fit_rows = [r for r in rows if r.workload in ZOO_FIT]
        held = [r for r in rows if r.workload in ZOO_HELD_OUT]
        # (fit, predict, the constants in overhead.py now) per probe
        fitter, predict, now_constant = {
            "cpu": (fit_cpu, predict_cpu, CPU_FIT),
            "virtual": (fit_virtual, predict_virtual, VIRTUAL_FIT),
        }[probe]
        fitted = fitter(fit_rows)
        now = score(held, predict(held, now_constant), probe, 1.0)
        bound = margin(fit_rows, predict(fit_rows, fitted))
        constants[probe] = (fitted, bound)
        results[probe] = {
            "record": path.name,
            "fit": score(fit_rows, predict(fit_rows, fitted), probe, bound),
            "held-out": score(held, predict(held, fitted), probe, bound),
            "held-out, constants before the refit": now,
        }
        for name in EXTRA_SETS if probe == "virtual" else ():
            extra = newest_extra(name)
            if extra is not None:  # configs in neither half: scored, never fitted on
                extra_rows = rows_of(extra)
                results[probe][name] = score(extra_rows, predict(extra_rows, fitted), probe, bound)
                sources[f"virtual {name}"] = extra
        _print(probe, path, results[probe], bound, sources)
    if constants:
        print("\n# paste into platform/elastune/memory/overhead.py")
    if "cpu" in constants:
        cpu, _ = constants["cpu"]
        print(
            f"CPU_FIT = CpuFit(fixed={cpu.fixed / _MiB:.1f} * _MiB, "
            f"row_optimizer={cpu.row_optimizer / _MiB:.1f} * _MiB, "
            f"activation_share={cpu.activation_share:.2f}, traced_share={cpu.traced_share:.4f}, "
            f"gradient_share={cpu.gradient_share:.3f})"
        )
    if "virtual" in constants:
        virtual = constants["virtual"][0]
        print(
            f"VIRTUAL_FIT = VirtualFit(runtime={virtual.runtime / _MiB:.2f} * _MiB, "
            f"churn_share={virtual.churn_share:.4f}, churn_cap={virtual.churn_cap / _MiB:.2f} * _MiB)"
        )
    for probe, (_, bound) in constants.items():
        kind = KINDS[probe]
        held = results[probe]["held-out"]
        print(
            f'SCREEN_MARGIN["{kind}"] = {bound:.2f}\n'
            f'HELD_OUT["{kind}"] = HeldOutError(band={held["band"]}, within={held["within"]}, '
            f"configs={held['configs']}, median={held['median']:.3f}, worst_under={held['worst_under']:.3f})"
        )
    if args.record:
        _record(sources, results, constants)


def score_recorded(path: Path) -> tuple[dict[str, Any], tuple[None, float]] | None:
    """A CUDA record, scored as it was predicted where it ran; the screening margin is fitted on its
    fit half. None (and a line saying why) where a half is missing: a GPU run cut short."""
    rows = recorded_rows(path)
    fit_rows = [r for r in rows if r.workload in ZOO_FIT]
    held = [r for r in rows if r.workload in ZOO_HELD_OUT]
    if not fit_rows or not held:
        print(f"\ncuda ({path.name}): {len(fit_rows)} fit-half and {len(held)} held-out configs; both are needed")
        return None

    def predicted(part: list[Recorded]) -> np.ndarray:
        return np.array([r.predicted for r in part], dtype=float)

    bound = margin(fit_rows, predicted(fit_rows))
    scores = {
        "record": path.name,
        "fit": score(fit_rows, predicted(fit_rows), "cuda", bound),
        "held-out": score(held, predicted(held), "cuda", bound),
    }
    return scores, (None, bound)


def _print(probe: str, path: Path, by_set: dict[str, Any], bound: float, sources: dict[str, Path]) -> None:
    print(f"\n{probe} ({path.name}):")
    for name, s in by_set.items():
        if name == "record":
            continue
        source = f" ({sources[f'virtual {name}'].name})" if name in EXTRA_SETS else ""
        print(
            f"  {name}{source}: {s['within']}/{s['configs']} within ±{s['band']:.0%}, median {s['median']:.1%}, "
            f"measured > 10% above prediction: {len(s['under'])} "
            + "; ".join(f"{label} {e:+.1%}" for label, e in s["under"])
        )
        if not name.startswith("held-out, constants before the refit"):
            print(f"    above prediction x {bound:.3f}: {len(s['over_bound'])} {' '.join(s['over_bound'])}")


def _record(sources: dict[str, Path], results: dict[str, dict[str, Any]], constants: dict[str, Any]) -> None:
    figures = []
    for probe, by_set in results.items():
        share = SHARES[probe]
        for name in ("held-out", "fit", *EXTRA_SETS):
            if name not in by_set:
                continue
            s = by_set[name]
            figures += [
                Figure(
                    f"{probe} {name}: configs within ±{s['band']:.0%}",
                    round(s["within"] / s["configs"], 3),
                    "",
                    f">= {share:.2f}",
                    s["within"] / s["configs"] >= share,
                    f"{s['within']}/{s['configs']}",
                ),
                Figure(
                    f"{probe} {name}: configs measured > 10% above their prediction",
                    len(s["under"]),
                    "",
                    "0",
                    not s["under"],
                    "; ".join(f"{label} {e:+.1%}" for label, e in s["under"]),
                ),
                Figure(f"{probe} {name}: median |error|", round(s["median"], 4)),
            ]
        bound = constants[probe][1]
        held = by_set["held-out"]
        figures.append(
            Figure(
                f"{probe} held-out: configs above the screening bound (prediction x {bound:.2f})",
                len(held["over_bound"]),
                "",
                "0",
                not held["over_bound"],
                " ".join(held["over_bound"]),
            )
        )
    write_record(
        "estimator-zoo-refit",
        "Estimator zoo: constants refitted on the fit half, both halves scored",
        figures,
        settings={
            "sources": {probe: path.name for probe, path in sources.items()},
            "fit_set": list(ZOO_FIT),
            "held_out_set": list(ZOO_HELD_OUT),
            **(
                {"cpu_fit": {k: round(v, 4) for k, v in vars(constants["cpu"][0]).items()}}
                if "cpu" in constants
                else {}
            ),
            **(
                {
                    "virtual_fit": {
                        "runtime_mib": round(constants["virtual"][0].runtime / _MiB, 3),
                        "churn_share": round(constants["virtual"][0].churn_share, 4),
                        "churn_cap_mib": round(constants["virtual"][0].churn_cap / _MiB, 3),
                    }
                }
                if "virtual" in constants
                else {}
            ),
            "screen_margin": {KINDS[probe]: round(bound, 3) for probe, (_, bound) in constants.items()},
        },
        notes=[
            "measured peaks from the source records, predictions re-scored under constants fitted on the fit half "
            "only (bench/fit_overhead.py): the held-out figures are the result, the fit half's are a fit"
            + (
                "; the check set (virtual) holds configs in neither half, named before the small-block term was "
                "fitted and fitted on by nothing (whether its run was blind: that record's notes)"
                if "virtual check" in sources
                else ""
            )
            + (
                "; the blind set (virtual): one config per workload in neither half nor the check set, named before "
                "the relative-error weighting of the virtual fit was measured on it"
                if "virtual blind" in sources
                else ""
            )
            + (
                "; CUDA: the record's own predictions, made on the GPU machine (its terms are not refitted here), "
                "only its screening margin fitted on the fit half"
                if "cuda" in results
                else ""
            ),
        ],
        table={
            "columns": ["probe", "config", "set", "error"],
            "rows": [
                [probe, label, name, f"{e:+.1%}"]
                for probe, by_set in results.items()
                for name in ("fit", "held-out", *EXTRA_SETS)
                if name in by_set
                for label, e in by_set[name]["errors"].items()
            ],
        },
    )


if __name__ == "__main__":
    main()
