"""Shared helpers of the benchmarks: real Debian descriptions, grouped splits, timing."""

from __future__ import annotations

import gzip
import json
import os
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "debdesc.jsonl.gz"
EXAMPLES = ROOT / "examples" / "debian-en-train.jsonl.gz"
CACHE_DIR = ROOT / "bench" / ".cache"
LIBRARY_SECTIONS = {"libs", "libdevel", "oldlibs"}


def debian_rows(n: int, *, lang: str = "en", seed: int = 0) -> tuple[list[dict[str, Any]], str]:
    """``n`` rows of real Debian descriptions (whole groups, shuffled by group), and the source.

    Reads ../shared/data when present, else the sample shipped in examples/.
    """
    source = SHARED if SHARED.exists() else EXAMPLES
    by_group: dict[str, list[dict[str, Any]]] = {}
    with gzip.open(source, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if row.get("lang", lang) != lang or not row.get("section"):
                continue
            by_group.setdefault(row["group"], []).append(row)
    groups = sorted(by_group)
    random.Random(seed).shuffle(groups)
    rows: list[dict[str, Any]] = []
    for g in groups:
        rows.extend(by_group[g])
        if len(rows) >= n:
            break
    rows = rows[:n]
    for r in rows:
        r["library"] = "yes" if r["section"] in LIBRARY_SECTIONS else "no"
        tags = r.get("tags") or []
        for facet in ("devel", "works-with", "uitoolkit"):
            r[facet.replace("-", "_")] = sorted(t for t in tags if t.startswith(facet + "::"))
        for key in ("role", "interface", "use", "implemented_in", "tags"):
            r[key] = list(r.get(key) or [])
    return rows, str(source.relative_to(ROOT.parent) if source == SHARED else source.name)


def corpus_rows(name: str, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` rows (whole groups, shuffled by group) of a shared corpus, any language."""
    path = ROOT.parent / "shared" / "data" / f"{name}.jsonl.gz"
    by_group: dict[str, list[dict[str, Any]]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            by_group.setdefault(row["group"], []).append(row)
    groups = sorted(by_group)
    random.Random(seed).shuffle(groups)
    rows: list[dict[str, Any]] = []
    for g in groups:
        rows.extend(by_group[g][: max(1, n // 200)])  # cap rows per group: more variety
        if len(rows) >= n:
            break
    return rows[:n]


def grouped_split(rows: list[dict[str, Any]], test_fraction: float = 0.2, seed: int = 0):
    from sklearn.model_selection import GroupShuffleSplit

    split = GroupShuffleSplit(n_splits=1, test_size=test_fraction, random_state=seed)
    tr, te = next(split.split(rows, groups=[r["group"] for r in rows]))
    return [rows[i] for i in tr], [rows[i] for i in te]


def best_of(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Fastest wall time of ``repeat`` runs (seconds)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def write_json(path: str | None, results: dict[str, Any]) -> None:
    """Write ``results`` to ``path`` (if given) for bench/RESULTS.md."""
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
