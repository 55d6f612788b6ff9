"""pareto.png, checked on matplotlib's own objects: what is plotted, what is labelled and named, and
that every marker and label lies inside the axes, for a realistic sweep and for the edge cases."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from elastune.tracking.pareto_plot import config_label, outcome, pareto_figure, pareto_png, trial_label
from elastune.tracking.records import SweepRecord, TrialRecord, pareto_front
from elastune.tuning.results import trial_label as results_label
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.text import Annotation

MIB = 1024**2
GIB = 1024**3


def trial(
    number: int, status: str, strategy: str = "full", precision: str = "fp32", micro: int = 512, **figures: Any
) -> TrialRecord:
    config = {
        "embedding": {"strategy": strategy},
        "precision": precision,
        "batch": {"micro": micro, "accum": 2048 // micro},
    }
    params = {"embedding.strategy": strategy, "precision": precision, "batch.micro": micro}
    return TrialRecord(trial_id=f"t{number:02d}", number=number, status=status, params=params, config=config, **figures)  # type: ignore[arg-type]


def reference(**figures: Any) -> TrialRecord:
    config = {"embedding": {"strategy": "full"}, "precision": "fp32", "batch": {"micro": 2048, "accum": 1}}
    return TrialRecord(
        trial_id="reference", number=-1, status="ok", params={"batch.micro": 2048}, config=config, **figures
    )


def sweep(trials: list[TrialRecord], ceiling: int | None = 256 * MIB) -> SweepRecord:
    return SweepRecord(sweep_id="plot", spec={}, status="finished", memory_ceiling_bytes=ceiling, trials=trials)


def realistic() -> SweepRecord:
    """Every outcome: a front of three, a confirmed best off the front, the reference, trials off the
    front, pruned, over the ceiling (measured), screened out, out of memory, failed and running."""
    return sweep(
        [
            reference(samples_per_s=41_000.0, peak_memory_bytes=230 * MIB, quality_ok=True),
            trial(0, "ok", "hashed", "bf16", 1024, samples_per_s=56_000.0, peak_memory_bytes=60 * MIB, quality_ok=True),
            trial(1, "ok", "hashed", "fp32", 512, samples_per_s=57_000.0, peak_memory_bytes=68 * MIB, quality_ok=False),
            trial(2, "ok", "int8", "bf16", 2048, samples_per_s=70_000.0, peak_memory_bytes=90 * MIB, quality_ok=True),
            trial(
                3,
                "ok",
                "half",
                "bf16",
                2048,
                samples_per_s=68_000.0,
                peak_memory_bytes=180 * MIB,
                quality_ok=True,
                confirmed_speedup=[1.3, 1.4, 1.5],
            ),
            trial(4, "ok", "half", "fp32", 1024, samples_per_s=45_000.0, peak_memory_bytes=150 * MIB, quality_ok=True),
            trial(5, "ok", "full", "bf16", 512, samples_per_s=47_000.0, peak_memory_bytes=225 * MIB, quality_ok=False),
            trial(6, "pruned", "full", "bf16", 1024, samples_per_s=26_000.0, peak_memory_bytes=220 * MIB),
            # no measured peak: a progress report carries none, so it sits at the predicted one
            trial(7, "pruned", "int8", "fp32", 512, samples_per_s=38_000.0, estimated_peak_bytes=75 * MIB),
            trial(8, "infeasible", "full", "fp32", 1024, samples_per_s=55_000.0, peak_memory_bytes=330 * MIB),
            trial(9, "infeasible", "full", "fp32", 2048, estimated_peak_bytes=345 * MIB, error="predicted over"),
            trial(10, "oom", "hashed", "fp32", 2048, estimated_peak_bytes=54 * MIB, error="CUDA out of memory"),
            trial(11, "failed", "half", "fp32", 512, error="boom"),
            trial(12, "running", "half", "bf16", 512),
        ]
    )


def dlrm_quick() -> SweepRecord:
    """The dlrm_quick sweep of docs/screenshots/console.png: six completed trials (1, 3 and 7 on the
    front, 7 the confirmed best), the reference, and three stopped early (0, 2, 5) with the
    samples/s of the windows they ran and a predicted peak, none measured."""
    ok = {"quality_ok": True}
    return sweep(
        [
            reference(samples_per_s=38_987.0, peak_memory_bytes=193 * MIB, estimated_peak_bytes=212 * MIB, **ok),
            trial(0, "pruned", "half", "bf16", 512, samples_per_s=65_051.0, estimated_peak_bytes=44 * MIB),
            trial(1, "ok", "int8", "fp32", 1024, samples_per_s=67_259.0, peak_memory_bytes=34 * MIB, **ok),
            trial(2, "pruned", "half", "fp32", 1024, samples_per_s=64_636.0, estimated_peak_bytes=58 * MIB),
            trial(3, "ok", "int8", "fp32", 1024, samples_per_s=73_487.0, peak_memory_bytes=51 * MIB, **ok),
            trial(4, "ok", "int8", "fp32", 2048, samples_per_s=77_911.0, peak_memory_bytes=74 * MIB, **ok),
            trial(5, "pruned", "full", "bf16", 1024, samples_per_s=24_518.0, estimated_peak_bytes=247 * MIB),
            trial(6, "ok", "half", "fp32", 2048, samples_per_s=80_897.0, peak_memory_bytes=69 * MIB, **ok),
            trial(
                7,
                "ok",
                "int8",
                "bf16",
                2048,
                samples_per_s=89_824.0,
                peak_memory_bytes=52 * MIB,
                confirmed_speedup=[2.04, 2.16, 2.29],
                **ok,
            ),
        ]
    )


EDGE_CASES = {
    "realistic": realistic(),
    "dlrm_quick": dlrm_quick(),
    "one trial": sweep([trial(0, "ok", samples_per_s=1000.0, peak_memory_bytes=100 * MIB)]),
    "all infeasible": sweep([trial(i, "infeasible", estimated_peak_bytes=(300 + 40 * i) * MIB) for i in range(5)]),
    "no completed trial": sweep(
        [
            trial(0, "pruned", samples_per_s=500.0, peak_memory_bytes=90 * MIB),
            trial(1, "failed"),
            trial(2, "oom", estimated_peak_bytes=400 * MIB),
        ]
    ),
    "identical points": sweep(
        [trial(i, "ok", samples_per_s=1000.0, peak_memory_bytes=100 * MIB) for i in range(4)]
        + [reference(samples_per_s=1000.0, peak_memory_bytes=100 * MIB)]
    ),
    "huge memory range": sweep(
        [
            trial(0, "ok", samples_per_s=300.0, peak_memory_bytes=3 * MIB),
            trial(1, "ok", "int8", "bf16", 1024, samples_per_s=9000.0, peak_memory_bytes=70 * GIB),
            trial(2, "infeasible", estimated_peak_bytes=200 * GIB),
        ],
        ceiling=80 * GIB,
    ),
    "points far beyond the ceiling": sweep(
        [trial(0, "ok", samples_per_s=5.0, peak_memory_bytes=10 * MIB), trial(1, "oom", estimated_peak_bytes=20 * MIB)],
        ceiling=600 * MIB,
    ),
    "no trial": sweep([]),
    "no ceiling": sweep([trial(0, "ok", samples_per_s=1000.0, peak_memory_bytes=100 * MIB)], ceiling=None),
}


def drawn(record: SweepRecord) -> tuple[Figure, Axes]:
    figure = pareto_figure(record)
    figure.draw_without_rendering()  # lays the texts out, as savefig does
    return figure, figure.axes[0]


def scatters(ax: Axes) -> dict[str, list[tuple[float, float]]]:
    """Each legend entry's plotted points."""
    return {
        c.get_label(): [tuple(xy) for xy in c.get_offsets()] for c in ax.collections if isinstance(c, PathCollection)
    }


def numbers(ax: Axes) -> list[Annotation]:
    return [t for t in ax.texts if isinstance(t, Annotation)]


def position(t: TrialRecord, measured: bool = True) -> tuple[float, float]:
    """Where a trial of `realistic()` (MiB) should be."""
    memory = t.peak_memory_bytes if measured else t.estimated_peak_bytes
    return (memory or 0) / MIB, t.samples_per_s or 0.0


def test_every_outcome_with_a_memory_figure_is_plotted_under_its_own_legend_entry() -> None:
    record = realistic()
    _, ax = drawn(record)
    by_label = scatters(ax)
    t = {x.trial_id: x for x in record.trials}
    assert by_label["stopped early (last samples/s), measured peak"] == [position(t["t06"])]
    assert by_label["stopped early (last samples/s), predicted peak"] == [position(t["t07"], measured=False)]
    assert by_label["ran over the ceiling (measured)"] == [position(t["t08"])]
    assert by_label["screened out, not run (predicted peak)"] == [position(t["t09"], measured=False)]
    assert by_label["out of memory (predicted peak)"] == [position(t["t10"], measured=False)]
    assert by_label["completed, quality out of tolerance"] == [position(t["t05"])]  # t01 is a front star
    assert by_label["reference"] == [position(t["reference"])]
    assert by_label["best (confirmed)"] == [position(t["t03"])]
    front = [position(x) for x in pareto_front(record.trials)]
    assert by_label["Pareto front"] == front == [position(t[i]) for i in ("t00", "t01", "t02")]
    everything = {xy for points in by_label.values() for xy in points}
    assert position(t["t04"]) in everything
    legend = {text.get_text() for text in ax.figure.legends[0].get_texts()}
    assert "memory ceiling 256.00 MiB" in legend and "completed" in legend
    # failed and running trials have no figures: counted in the title, with the reason
    assert "not plotted: 1 failed (no samples/s recorded) · 1 running (no figures yet)" in ax.get_title()
    assert "2 stopped early (pruned)" in ax.get_title()
    assert [outcome(x) for x in (t["t11"], t["t12"])] == [None, None]


def test_the_front_the_best_and_the_reference_are_labelled_and_named_in_the_key() -> None:
    record = realistic()
    figure, ax = drawn(record)
    by_point = {tuple(a.xy): a.get_text() for a in numbers(ax)}
    t = {x.trial_id: x for x in record.trials}
    # labelled with the trial's number: the front (t00 t01 t02), the best (t03), the reference
    expected = {"t00": "0", "t01": "1", "t02": "2", "t03": "3", "reference": "ref"}
    assert {position(t[i]): n for i, n in expected.items()} == by_point
    key = figure.texts[-1].get_text().splitlines()  # left to right
    assert key[0].startswith("trial 0:  hashed · bf16 · 1024×2  (56,000 samples/s, 60.00 MiB")
    assert "best, confirmed 1.40× ref" in key[3] and key[3].startswith("trial 3:  half · bf16 · 2048×1")
    assert key[4].startswith("ref:  full · fp32 · 2048×1") and key[4].endswith("reference)")
    assert "quality out of tolerance" in key[1]


def test_a_trial_stopped_early_is_plotted_at_its_samples_per_s_and_its_peak_measured_or_predicted() -> None:
    record = dlrm_quick()  # the three stopped trials reported samples/s; none measured a peak
    _, ax = drawn(record)
    by_label = scatters(ax)
    t = {x.number: x for x in record.trials}
    stopped = [(t[n].estimated_peak_bytes or 0) / MIB for n in (0, 2, 5)]
    assert by_label["stopped early (last samples/s), predicted peak"] == list(
        zip(stopped, [65_051.0, 64_636.0, 24_518.0], strict=True)
    )
    assert "stopped early (last samples/s), measured peak" not in by_label
    legend = {text.get_text() for text in ax.figure.legends[0].get_texts()}
    assert "stopped early (last samples/s), predicted peak" in legend
    assert "predicted where none was measured" in ax.get_xlabel()
    # a measured peak wins over the predicted one
    measured = trial(0, "pruned", samples_per_s=500.0, peak_memory_bytes=90 * MIB, estimated_peak_bytes=70 * MIB)
    assert outcome(measured) == "pruned"
    _, ax = drawn(sweep([measured]))
    assert scatters(ax)["stopped early (last samples/s), measured peak"] == [(90.0, 500.0)]


def test_points_are_labelled_with_the_trial_numbers_the_console_and_the_table_use() -> None:
    figure, ax = drawn(dlrm_quick())
    # left to right the front is trials 1, 3 and 7 (the best); in the old numbering they were 1, 2, 3
    labels = sorted((tuple(a.xy), a.get_text()) for a in numbers(ax))
    assert [text for _, text in labels] == ["1", "3", "7", "ref"]
    assert labels[2] == ((52.0, 89_824.0), "7")
    key = figure.texts[-1].get_text().splitlines()
    assert [line.split(":")[0] for line in key] == ["trial 1", "trial 3", "trial 7", "ref"]
    assert "best, confirmed 2.16× ref" in key[2]
    # the console's and the table's names (tuning/results.py, which tracking/ may not import)
    screened = TrialRecord(trial_id="screened-3", number=-1, status="infeasible", params={}, config={})
    for x in [*dlrm_quick().trials, screened]:
        assert trial_label(x) == results_label(x)
    assert [trial_label(x) for x in dlrm_quick().trials[:3]] == ["ref", "0", "1"]


def test_the_title_counts_every_outcome_and_says_why_a_trial_is_not_plotted() -> None:
    _, ax = drawn(dlrm_quick())
    title = ax.get_title()
    assert "9 trials: 6 completed · 3 stopped early (pruned)" in title
    assert "not plotted" not in title and "no figures" not in title
    unplottable = [
        trial(0, "ok", samples_per_s=1000.0, peak_memory_bytes=100 * MIB),
        trial(1, "pruned", samples_per_s=0.0, estimated_peak_bytes=50 * MIB),  # stopped while warming up
        trial(2, "failed", estimated_peak_bytes=50 * MIB, error="the trial reported nothing"),
        trial(3, "pruned", samples_per_s=900.0),  # no peak, measured or predicted
        trial(4, "interrupted", estimated_peak_bytes=50 * MIB),
    ]
    _, ax = drawn(sweep(unplottable))
    title = ax.get_title().replace("\n", " ")
    assert "5 trials: 1 completed" in title
    for reason in (
        "1 failed (no samples/s recorded)",
        "1 pruned (stopped before its first timed window)",
        "1 pruned (no peak memory figure)",
        "1 interrupted (stopped with the sweep, to run again)",
    ):
        assert reason in title, (reason, title)
    assert [outcome(x) for x in unplottable[1:]] == [None] * 4


@pytest.mark.parametrize("case", list(EDGE_CASES))
def test_every_marker_and_number_lies_inside_the_axes(case: str) -> None:
    record = EDGE_CASES[case]
    figure, ax = drawn(record)
    box = ax.get_window_extent()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    points = 0
    for collection in (c for c in ax.collections if isinstance(c, PathCollection)):
        sizes = collection.get_sizes()
        for i, (x, y) in enumerate(collection.get_offsets()):
            assert x0 < x < x1 and y0 < y < y1, (collection.get_label(), x, y, ax.get_xlim(), ax.get_ylim())
            # a marker's radius in pixels: its size is an area in points²
            radius = math.sqrt(sizes[i % len(sizes)]) / 2 * figure.dpi / 72 + 1
            px, py = ax.transData.transform((x, y))
            assert box.x0 <= px - radius and px + radius <= box.x1, (case, collection.get_label(), x)
            assert box.y0 <= py - radius and py + radius <= box.y1, (case, collection.get_label(), y)
            points += 1
    for number in numbers(ax):
        extent = number.get_window_extent()
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0 and extent.y1 <= box.y1, (
            case,
            number.get_text(),
        )
    if record.memory_ceiling_bytes is not None:
        unit = GIB if case == "huge memory range" else MIB
        assert x0 < record.memory_ceiling_bytes / unit < x1
    plotted = [t for t in record.trials if outcome(t) is not None]
    assert points >= len(plotted)  # the best's ring is drawn over its point


def test_numbers_cover_no_other_number_and_no_marker_where_there_is_room() -> None:
    _, ax = drawn(realistic())
    extents = [n.get_window_extent() for n in numbers(ax)]
    assert len(extents) == 5
    assert not any(a.overlaps(b) for i, a in enumerate(extents) for b in extents[i + 1 :])
    centres = [ax.transData.transform(xy) for points in scatters(ax).values() for xy in points]
    covered = [
        (n.get_text(), tuple(c)) for n in numbers(ax) for c in centres if n.get_window_extent().padded(4).contains(*c)
    ]
    assert covered == []


def test_configs_at_one_point_share_one_number() -> None:
    _, ax = drawn(EDGE_CASES["identical points"])
    assert [n.get_text() for n in numbers(ax)] == ["0,ref"]  # the front's one point and the reference


def test_memory_over_a_wide_range_is_drawn_on_a_log_axis() -> None:
    _, ax = drawn(EDGE_CASES["huge memory range"])
    assert ax.get_xscale() == "log"
    _, ax = drawn(realistic())
    assert ax.get_xscale() == "linear"


def test_a_sweep_without_figures_says_so() -> None:
    _, ax = drawn(EDGE_CASES["no trial"])
    assert "no trial has figures yet" in [t.get_text() for t in ax.texts]


@pytest.mark.parametrize("case", ["realistic", "no trial"])
def test_the_png_fits_the_width_mlflow_shows(case: str) -> None:
    png = pareto_png(EDGE_CASES[case])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert 600 <= width <= 820 and height > 400, (width, height)


def test_a_config_label_names_strategy_precision_and_batch_split() -> None:
    label = config_label(trial(0, "ok", "int8", "bf16", 1024))
    assert label == "int8 · bf16 · 1024×2"
    with_extra = trial(1, "ok")
    with_extra.params["data.padding"] = "packed"
    with_extra.params["data.pin_memory"] = True
    assert (
        config_label(with_extra, ["data.padding", "data.pin_memory"])
        == "full · fp32 · 512×4 · padding=packed · pin_memory=true"
    )
    long = trial(2, "ok")
    long.params["model.activation_checkpointing"] = "every_block" * 10
    assert config_label(long, ["model.activation_checkpointing"]).endswith("…")
    assert len(config_label(long, ["model.activation_checkpointing"])) <= 72
    bare = TrialRecord(trial_id="x1", number=0, status="ok", params={}, config={})
    assert config_label(bare) == "x1"
