"""Measured figures live in bench/RESULTS.md (rendered from bench/records/). A page that quotes one
puts it in a marked block naming the benchmark:

    <!-- figures: estimator-zoo-refit -->
    ... 20 of the 24 held-out configs ... a median error of 8.9% ...
    <!-- /figures -->

and every number in the block must be one of that benchmark's newest record: a figure's value or
note, or a cell of its table (names and targets do not count). A number matches when the record's,
rounded to the decimals the page writes, is the same (8.9 for 0.0889 written as a percentage, 0.30
for 0.297). The newest record is the one bench/render.py shows: the last by (date, file name). So a
page cannot keep a figure that a newer run changed, or one that no run measured."""

from __future__ import annotations

import json
import re
import shutil
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "bench" / "records"
BLOCK = re.compile(r"<!-- figures: ([\w.-]+) -->(.*?)(?:<!-- /figures -->|\Z)", re.S)
# a number standing alone: not the 16 of bf16 or H100's 100; 1,024 and 0.5 whole
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(%?)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def newest_record(benchmark: str, records: Path = RECORDS) -> dict | None:
    found = []
    for path in sorted(records.glob("*.json")):
        data = json.loads(path.read_text())
        if data.get("benchmark") == benchmark:
            found.append((data["date"], path.name, data))
    return max(found, key=lambda f: (f[0], f[1]))[2] if found else None


def record_numbers(record: dict) -> list[Decimal]:
    """Every number a record reports: its figures' values and notes, and its table's cells."""
    texts: list[object] = []
    for figure in record["figures"]:
        texts += [figure.get("value"), figure.get("note")]
    for row in (record.get("table") or {}).get("rows", []):
        texts += row
    numbers: list[Decimal] = []
    for item in texts:
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, int | float):
            numbers.append(abs(Decimal(str(item))))
        else:
            numbers += [Decimal(n.replace(",", "")) for n, _ in NUMBER.findall(str(item))]
    return numbers


def _matches(written: str, percent: bool, numbers: list[Decimal]) -> bool:
    """`written` (as the page has it) is one of `numbers` rounded half up to its decimals; a
    percentage may also be a share (8.9% for 0.0889)."""
    value = Decimal(written.replace(",", ""))
    step = Decimal(1).scaleb(value.as_tuple().exponent)  # 0.1 for 8.9, 1 for 20
    scales = (Decimal(1), Decimal(100)) if percent else (Decimal(1),)
    return any((n * scale).quantize(step, ROUND_HALF_UP) == value for n in numbers for scale in scales)


def figure_problems(text: str, page: str = "README.md", records: Path = RECORDS) -> list[str]:
    """What is wrong with the marked figure blocks of `text`: an unknown benchmark, a block that is
    not closed, or a number that the benchmark's newest record does not hold."""
    problems = []
    for match in BLOCK.finditer(text):
        benchmark, block = match.group(1), match.group(2)
        if not match.group(0).endswith("<!-- /figures -->"):
            problems.append(f"{page}: the figures block of {benchmark} is not closed (<!-- /figures -->)")
        record = newest_record(benchmark, records)
        if record is None:
            problems.append(f"{page}: no record of benchmark {benchmark!r} in {records}")
            continue
        numbers = record_numbers(record)
        prose = re.sub(r"\]\([^)]*\)", "]", block)  # a link's target is not a figure
        for written, percent in NUMBER.findall(prose):
            if not _matches(written, bool(percent), numbers):
                problems.append(
                    f"{page}: {written}{percent} is not a figure of {benchmark}'s newest record ({record['date']}); "
                    "quote bench/RESULTS.md, or move the figure out of the page"
                )
    return problems


def test_every_figure_on_the_pages_is_in_its_benchmarks_newest_record() -> None:
    problems = [p for page in pages() for p in figure_problems(page.read_text(), page.name)]
    assert problems == []


def test_the_front_page_keeps_its_figures_in_a_marked_block() -> None:
    assert BLOCK.search((ROOT / "README.md").read_text()), "README.md: no <!-- figures: ... --> block"


def test_a_wrong_number_in_a_copy_of_the_readme_is_caught() -> None:
    readme = (ROOT / "README.md").read_text()
    block = BLOCK.search(readme)
    assert block is not None
    written = NUMBER.search(block.group(2))
    assert written is not None, "the README's figures block quotes no number"
    start = block.start(2) + written.start(1)
    wrong = readme[:start] + "987.6" + readme[start + len(written.group(1)) :]
    problems = figure_problems(wrong)
    assert len(problems) == 1 and "987.6" in problems[0], problems


def test_only_the_newest_record_counts(tmp_path: Path) -> None:
    source = sorted(RECORDS.glob("estimator-zoo-refit-*.json"))[-1]
    old, new = json.loads(source.read_text()), json.loads(source.read_text())
    old["date"], new["date"] = "2020-01-01", "2020-01-02"
    old["figures"] = [{"name": "speed-up", "value": 1.75, "unit": "x"}]
    new["figures"] = [{"name": "speed-up", "value": 1.25, "unit": "x", "note": "3/4 configs"}]
    new["table"] = {"columns": ["config", "MiB"], "rows": [["int8", "366 MiB"]]}
    (tmp_path / "b-new.json").write_text(json.dumps(new))
    (tmp_path / "a-old.json").write_text(json.dumps(old))
    page = "<!-- figures: {} -->\n{}\n<!-- /figures -->"
    name = new["benchmark"]
    assert figure_problems(page.format(name, "1.25x, 3 of 4, 366 MiB, 125%"), records=tmp_path) == []
    assert figure_problems(page.format(name, "1.3x (rounded half up)"), records=tmp_path) == []
    assert len(figure_problems(page.format(name, "1.2x"), records=tmp_path)) == 1
    assert len(figure_problems(page.format(name, "1.75x"), records=tmp_path)) == 1  # the older run's
    shutil.copy(tmp_path / "a-old.json", tmp_path / "c-old.json")  # a later file name does not make it newer
    assert len(figure_problems(page.format(name, "1.75x"), records=tmp_path)) == 1


def test_unknown_benchmarks_and_open_blocks_are_problems() -> None:
    assert (
        "no record of benchmark 'no-such-bench'"
        in figure_problems("<!-- figures: no-such-bench -->\n<!-- /figures -->")[0]
    )
    open_block = "<!-- figures: estimator-zoo-refit -->\nno closing marker"
    assert any("not closed" in p for p in figure_problems(open_block))
