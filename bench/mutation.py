"""Mutation testing of the pure core with mutmut: of the mutants mutmut makes in each module (an
operator flipped, a constant moved by one, an argument dropped, a string changed), how many the fast
unit tests kill. Every mutant they let through is listed with why no test can kill it (`EQUIVALENT`)
or marked as a gap to close. Target: at most 10% of each module's mutants not killed.

    python bench/mutation.py            # a fresh run (`make mutation`): about 6 minutes on 2 cores
    python bench/mutation.py --reuse    # keep mutmut's results: re-test only what changed since
    python bench/mutation.py --report   # the last run's results again, without running

mutmut 3 names a mutated module by its file's path less a leading `src/`, and imports the mutated
copy from mutants/src, so it cannot run over platform/ in place: it runs in build/mutation/, where
`src`, `tests` and `pyproject.toml` link back to the checkout. What it mutates and which tests it
runs (the modules' own fast unit tests, nothing slow) are [tool.mutmut] in pyproject.toml; each
mutant runs the selected tests that reach its function, fastest first, until one fails. Each
process is held to MEMORY_LIMIT of address space: some mutants make a loop that allocates forever.
Never run `mutmut apply` there: src/ is the checkout's platform/.

Counting: a mutant that survived and one that no selected test reaches both count against their
module (neither is tested); one that timed out counts as killed (the tests hung on it, and a run
notices that).
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "mutation"
LINKS = {"src": ROOT / "platform", "tests": ROOT / "tests", "pyproject.toml": ROOT / "pyproject.toml"}
TARGET = 0.10  # the most of a module's mutants that may go unkilled
# A mutant of reshape.ladder (// 3 for // 2) appends zeros forever; unchecked it took 9 GB in a
# minute. The run's processes (mutmut forks a child per mutant) use about 1 GiB of address space.
MEMORY_LIMIT = 4 * 2**30

# Mutants no test can kill, by (module, function, the mutated line as mutmut writes it): nothing a
# caller can observe changes. An entry that matches no surviving mutant is reported as stale, so
# this list cannot outlive the code it describes.
EQUIVALENT: dict[tuple[str, str, str], str] = {
    # edo/policy.py
    (
        "edo/policy.py",
        "_water_fill",
        "active = [tid for tid in targets if trials[tid].want_bytes >= targets[tid]]",
    ): "a trial already at its want joins the first round only to be capped with nothing taken "
    "(want - target = 0); the level the others fill to does not depend on the round a trial is capped in",
    (
        "edo/policy.py",
        "_water_fill",
        "while slack > 0 or active:",
    ): "slack is never negative (minimums fit the budget; a cap, an int, takes at most its offer), and at 0 "
    "every offer is 0: nobody is capped and nothing is added; with no active trial the round adds nothing",
    (
        "edo/policy.py",
        "_water_fill",
        "while slack >= 0 and active:",
    ): "at slack 0 every offer is 0: nobody is capped, int(0) is added, and the loop returns",
    ("edo/policy.py", "admit", "self._seq = 1"): "arrival order only breaks ties in stable sorts of trials "
    "listed in arrival order (the trials dict; a re-admitted trial is re-inserted last), so equal numbers "
    "order them the same",
    ("edo/policy.py", "admit", "self._seq += 2"): "any increasing sequence orders arrivals the same",
    (
        "edo/policy.py",
        "admit",
        "trial = TrialState(trial_id, device, min_bytes, max(want_bytes, min_bytes), priority, None, now)",
    ): "as for `self._seq = 1`: sort keys that differ only in seq compare equal when seq is None, and the "
    "stable sort keeps arrival order",
    ("edo/policy.py", "admit", "trial.state = None"): "_reconcile, called next for the trial's device, sets "
    "the state of every trial that is not waiting (None is not WAITING, as RUNNING is not)",
    ("edo/policy.py", "_reconcile", "if target >= trial.grant_bytes:"): "at equality the growth is "
    "min(0, free) = 0 (free is never negative: invariant I1)",
    # edo/reshape.py
    (
        "edo/reshape.py",
        "fit",
        "rows = min(self.rows + int(room / self.row_bytes), self.rows0)",
    ): "differs from room // row_bytes only for a negative, non-integer quotient, where truncation is one row "
    "above the floor and the settling step right after takes that row back (400,000 random shapes agreed)",
    # memory/cuda_allocator.py
    (
        "memory/cuda_allocator.py",
        "__init__",
        "self._next_key = -2  # keys for buffers no traced tensor owns",
    ): "keys for unowned buffers need only be negative and distinct (traced tensors are keyed by their "
    "storages' addresses): -2, -3, ... serve as -1, -2, ... do",
    (
        "memory/cuda_allocator.py",
        "malloc",
        "key, self._next_key = self._next_key, self._next_key - 2",
    ): "as above: -1, -3, -5, ... are negative and distinct",
    (
        "memory/cuda_allocator.py",
        "__init__",
        "self._base = 1  # address counter: the best fit breaks ties by address, as the allocator does",
    ): "every address moves up by one: ties are broken by the addresses' order, which is unchanged",
    ("memory/cuda_allocator.py", "malloc", "block.free = None"): "`free` is only read as a truth value "
    "(`neighbour.free`), and None is as false as False",
    # units.py
    ("units.py", "parse_bytes", "size = int(min(value, 3.0 * MAX_BYTES))"): "the cap only keeps int() of a "
    "huge float small; capped at 2x or 3x MAX_BYTES, it is refused as over MAX_BYTES alike",
    # untrusted.py
    ("untrusted.py", "_refusal", 'section = key.split(".", )[0]'): "the first part of a key is the same "
    "however many times the rest is split",
    ("untrusted.py", "_refusal", 'section = key.split(".", 2)[0]'): "the first part of a key is the same "
    "however many times the rest is split",
    ("untrusted.py", "override_problems", '_, sep, _ = item.rpartition("=")'): "only `sep` is used, and "
    'partition and rpartition find "=" alike',
    ("untrusted.py", "read_stored_config", 'with path.open(encoding="UTF-8") as file:'): "the same codec "
    "by another name",
    ("untrusted.py", "read_stored_config", "text = file.read(limits.max_chars + 2)"): "one character more "
    "read changes nothing: any text longer than max_chars is refused whole",
    (
        "untrusted.py",
        "stored_config_problems",
        'problems = [Problem(f"{field}.{p.path}", p.value, p.message) for p in named]',
    ): "`problems` is still empty there: assigning and extending give the same list",
    (
        "untrusted.py",
        "client_checkpoint",
        'safe = "".join(c if c.isalnum() or c in "XX-_.XX" else "_" for c in job_id).strip(".") or "job"',
    ): 'the only characters added to those kept are "X", which isalnum() keeps already',
}


@dataclass
class Mutant:
    name: str  # mutmut's, e.g. elastune.edo.policy.xǁPolicyǁadmit__mutmut_3
    module: str  # e.g. edo/policy.py
    status: str  # mutmut's word: killed, survived, no tests, timeout, ...
    function: str = ""
    line: int | None = None
    removed: list[str] = field(default_factory=list)  # the original line(s), stripped
    added: list[str] = field(default_factory=list)  # the mutated line(s), stripped

    @property
    def snippet(self) -> str:
        """Its key in EQUIVALENT: the mutated code, or what was dropped where nothing replaces it."""
        return " | ".join(self.added) if self.added else "removed: " + " | ".join(self.removed)

    @property
    def change(self) -> str:
        return f"{' | '.join(self.removed)} → {' | '.join(self.added) or '(removed)'}"

    @property
    def counted_killed(self) -> bool:
        return self.status in ("killed", "timeout")

    @property
    def verdict(self) -> str:
        if self.counted_killed:
            return self.status if self.status == "killed" else "timed out: counted as killed"
        reason = EQUIVALENT.get((self.module, self.function, self.snippet))
        return f"equivalent: {reason}" if reason else "NOT EXPLAINED: kill it with a test, or add it to EQUIVALENT"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reuse", action="store_true", help="keep mutmut's results; re-test only what changed")
    parser.add_argument("--report", action="store_true", help="the last run's results, without running")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2, help="mutants tested at once")
    from record import add_arguments, refuse_dirty

    add_arguments(parser)
    args = parser.parse_args()
    refuse_dirty(args.allow_dirty)

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    modules = [path.removeprefix("src/elastune/") for path in config["only_mutate"]]
    _stage(fresh=not (args.reuse or args.report))
    seconds = None
    if not args.report:
        started = time.monotonic()
        command = [_mutmut(), "run", "--max-children", str(args.max_children)]
        code = subprocess.call(command, cwd=WORK, preexec_fn=_limit_memory)
        seconds = round(time.monotonic() - started)
        if code:
            print(f"mutmut run exited {code}: its results are incomplete, no record written", file=sys.stderr)
            return code
    mutants = _results(modules)
    _describe([m for m in mutants if m.status != "killed"])
    return _report(mutants, modules, config, args, seconds)


def _stage(fresh: bool) -> None:
    """build/mutation/ with its links to the checkout; without mutmut's last results when `fresh`."""
    WORK.mkdir(parents=True, exist_ok=True)
    for name, target in LINKS.items():
        link = WORK / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(target, WORK))
    if fresh:
        shutil.rmtree(WORK / "mutants", ignore_errors=True)


def _limit_memory() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, hard))


def _mutmut() -> str:
    beside = Path(sys.executable).with_name("mutmut")  # the venv's, next to this interpreter
    return str(beside) if beside.exists() else shutil.which("mutmut") or "mutmut"


def _results(modules: list[str]) -> list[Mutant]:
    """Every mutant of `modules` with mutmut's verdict, from its per-file results."""
    from mutmut.stats import status_by_exit_code  # mutmut's own reading of its exit codes

    mutants = []
    for module in modules:
        meta = WORK / "mutants" / "src" / "elastune" / f"{module}.meta"
        if not meta.exists():
            raise SystemExit(f"{meta.relative_to(ROOT)}: no results for {module}; run without --report first")
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        mutants += [Mutant(name, module, status_by_exit_code[code]) for name, code in codes.items()]
    return mutants


def _describe(mutants: list[Mutant]) -> None:
    """Each mutant's function, line and change, from `mutmut show` (its diff against the original)."""

    def show(mutant: Mutant) -> str:
        out = subprocess.run([_mutmut(), "show", mutant.name], cwd=WORK, capture_output=True, text=True, check=True)
        return out.stdout

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        diffs = list(pool.map(show, mutants))
    sources: dict[str, list[str]] = {}
    for mutant, diff in zip(mutants, diffs, strict=True):
        body = [line for line in diff.splitlines() if line[:3] not in ("---", "+++")]
        mutant.removed = [line[1:].strip() for line in body if line.startswith("-")]
        mutant.added = [line[1:].strip() for line in body if line.startswith("+")]
        mangled = mutant.name.rsplit(".", 1)[1].split("__mutmut_")[0]  # x_share, xǁPolicyǁadmit
        owner, _, mutant.function = mangled.removeprefix("x_").removeprefix("xǁ").rpartition("ǁ")
        if mutant.module not in sources:
            sources[mutant.module] = (ROOT / "platform" / "elastune" / mutant.module).read_text().splitlines()
        mutant.line = _line_of(sources[mutant.module], owner or None, mutant)


def _line_of(lines: list[str], owner: str | None, mutant: Mutant) -> int | None:
    """The line the mutant changes: its first removed line, found within its function."""
    tree = ast.parse("\n".join(lines))
    scope = next((n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner), tree.body)
    node = next((n for n in scope if isinstance(n, ast.FunctionDef) and n.name == mutant.function), None)
    if node is None or not mutant.removed:
        return None
    span = range(node.lineno - 1, node.end_lineno or node.lineno)
    return next((i + 1 for i in span if lines[i].strip() == mutant.removed[0]), None)


def _report(
    mutants: list[Mutant], modules: list[str], config: dict[str, Any], args: argparse.Namespace, seconds: int | None
) -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    from record import Figure, write_record

    figures = []
    print(f"\n{'module':<26}{'mutants':>8}{'killed':>8}{'timeout':>8}{'survived':>9}{'no tests':>9}{'not killed':>11}")
    for module in modules:
        own = [m for m in mutants if m.module == module]
        counts = Counter(m.status for m in own)
        unkilled = [m for m in own if not m.counted_killed]
        share = len(unkilled) / len(own) if own else 0.0
        equivalent = sum(m.verdict.startswith("equivalent") for m in unkilled)
        print(
            f"{module:<26}{len(own):>8}{counts['killed']:>8}{counts['timeout']:>8}{counts['survived']:>9}"
            f"{counts['no tests']:>9}{share:>11.1%}"
        )
        figures.append(
            Figure(
                f"{module}: share of mutants not killed",
                round(share, 3),
                "",
                f"<= {TARGET:.2f}",
                share <= TARGET,
                f"{counts['killed']} killed, {counts['timeout']} timed out, {counts['survived']} survived, "
                f"{counts['no tests']} reached by no test, of {len(own)}; {equivalent} of the "
                f"{len(unkilled)} not killed are equivalent",
            )
        )
    listed = sorted((m for m in mutants if m.status != "killed"), key=lambda m: (m.module, m.line or 0, m.name))
    unexplained = [m for m in listed if m.verdict.startswith("NOT EXPLAINED")]
    figures.append(
        Figure(
            "mutants not killed and not shown equivalent",
            len(unexplained),
            "",
            "0",
            not unexplained,
            "; ".join(f"{m.module}:{m.line} {m.change}" for m in unexplained),
        )
    )
    if seconds is not None:
        figures.append(Figure("run time", seconds, "s", note=f"{args.max_children} mutants at a time"))
    for m in listed:
        print(f"  {m.module}:{m.line} {m.function}: {m.change}\n      {m.verdict}")
    seen = {(m.module, m.function, m.snippet) for m in listed}
    stale = [key for key in EQUIVALENT if key not in seen]
    for key in stale:
        print(f"  stale EQUIVALENT entry, no such mutant survives: {key}")
    write_record(
        "mutation",
        "Mutation testing (mutmut): mutants the fast unit tests do not kill, per module",
        figures,
        settings={
            "tool": f"mutmut {_version()}",
            "modules": modules,
            "tests": config["pytest_add_cli_args_test_selection"],
            "max_children": args.max_children,
            "fresh": not (args.reuse or args.report),
        },
        notes=[
            "Not killed = survived + reached by no selected test; a timeout counts as killed. Each mutant runs "
            "the selected tests that reach its function (pyproject.toml [tool.mutmut]), fastest first.",
            *[f"stale EQUIVALENT entry: {key}" for key in stale],
        ],
        table={
            "columns": ["module", "line", "function", "mutation", "status", "verdict"],
            "rows": [[m.module, m.line, m.function, m.change, m.status, m.verdict] for m in listed],
        },
    )
    missed = any(not f.met for f in figures if f.target is not None)
    return 1 if missed else 0


def _version() -> str:
    from importlib.metadata import version

    return version("mutmut")


if __name__ == "__main__":
    sys.exit(main())
