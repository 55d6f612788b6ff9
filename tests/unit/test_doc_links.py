"""Every relative link of README.md and docs/*.md points at a file that exists, and a link to a
heading (`page.md#heading`) at a heading the page has, as GitHub names its anchors. The guides
moved out of the README and link each other; a renamed heading or file fails here, not for a reader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The page without its code: fenced blocks and inline code spans, whose brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces to
    hyphens, a repeated one suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def link_problems(page: Path, root: Path = ROOT) -> list[str]:
    """The links of `page` that point at no file, or at no heading of the page they name."""
    problems = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z][a-z+.-]*:", target):  # https:, mailto:: not a file of this repository
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        name = f"{page.relative_to(root)}: ({target})"
        if not file.exists():
            problems.append(f"{name}: no file {file.relative_to(root) if file.is_relative_to(root) else file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"{name}: {file.name} has no heading with the anchor #{anchor}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_and_headings_that_exist(page: Path) -> None:
    assert link_problems(page) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A title: `with code`\n\n## Try it\n\n## Try it\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-title-with-code) [ok](other.md#try-it-1) [web](https://example.com/x.md)\n"
        "`[not a link](gone.md)`\n[gone](gone.md) [bad anchor](other.md#try-it-2)\n"
    )
    problems = link_problems(page, root=tmp_path)
    assert len(problems) == 2 and "no file gone.md" in problems[0] and "#try-it-2" in problems[1], problems
