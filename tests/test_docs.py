"""The documentation: a short README, every page reachable, every link whole, the CLI
reference current, the design page true to the package."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SRC = ROOT / "src" / "manyheads"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _links(page: Path) -> list[Path]:
    """The local files a Markdown page links to."""
    text = page.read_text(encoding="utf-8")
    return [
        (page.parent / target).resolve()
        for target in LINK.findall(text)
        if "://" not in target and not target.startswith("mailto:")
    ]


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200


def test_every_link_resolves_and_every_page_is_reachable_from_the_readme():
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    broken = [
        (str(p.relative_to(ROOT)), str(t)) for p in pages for t in _links(p) if not t.exists()
    ]
    assert broken == []
    seen, todo = set(), [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md":
            continue
        seen.add(page)
        todo += [t for t in _links(page) if DOCS in t.parents]
    unreachable = [str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md") if p not in seen]
    assert unreachable == []


def test_the_cli_reference_is_current():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import make_cli_reference
    finally:
        sys.path.pop(0)
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    assert page == make_cli_reference.render(), (
        "docs/reference/cli.md is stale: run .venv/bin/python scripts/make_cli_reference.py"
    )


def test_the_design_page_names_every_part_and_only_parts_that_exist():
    text = (DOCS / "design.md").read_text(encoding="utf-8")
    named_files = set(re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)`", text))
    missing = sorted(
        f for f in named_files if not (ROOT / f if f.startswith("tests/") else SRC / f).is_file()
    )
    assert missing == []
    parts = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    parts |= {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    unnamed = sorted(p for p in parts if f"`{p}`" not in text and f"`{p}/`" not in text)
    assert unnamed == []
    for folder in ("trunks", "heads", "bundle", "train", "serve", "cli", "jobs", "label"):
        modules = {p.name for p in (SRC / folder).glob("*.py") if p.stem != "__init__"}
        unmentioned = sorted(m for m in modules if m not in text)
        assert unmentioned == [], folder
