"""Shared helpers of the benchmarks: real Debian descriptions, grouped splits, timing."""

from __future__ import annotations

import gzip
import json
import os
import platform
import random
import subprocess
import sys
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


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo; the platform's word elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_json(path: str | None, results: dict[str, Any]) -> None:
    """Write ``results`` to ``path`` (if given) for bench/RESULTS.md."""
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)


def speed_split(
    n_rows: int, n_texts: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """The speed benches' data (trunk_speed.py, serve_load.py use the same): ``n_rows``
    English Debian rows, grouped 80/20 split; the train rows, the first ``n_texts``
    held-out rows, and the source."""
    rows, source = debian_rows(n_rows)
    train, test = grouped_split(rows)
    return train, test[:n_texts], source


def speed_bundle(
    trunk: str, train: list[dict[str, Any]], heads: dict[str, str], cache: Any
) -> Path:
    """The bench bundle for ``trunk`` trained on ``train`` (``{head: kind}``, the
    ``manyheads train`` defaults: C=auto, accuracy thresholds), built once in CACHE_DIR."""
    from manyheads import Bundle

    folder = CACHE_DIR / f"speed-{trunk.replace('+', '-')}-{len(train)}"
    if (folder / "bundle.json").exists():
        return folder
    bundle = Bundle(trunk=trunk, cache=cache)
    texts = [r["text"] for r in train]
    for name, kind in heads.items():
        bundle.fit_head(
            name,
            texts,
            [r[name] for r in train],
            kind=kind,
            groups=[r["group"] for r in train],
            C="auto",
            thresholds="accuracy",
        )
    bundle.save(folder)
    return folder


def exported_bundle(folder: Path, quantization: str) -> Path:
    """``folder`` exported to ONNX (``"fp32"`` or ``"int8"``), built once beside it."""
    from manyheads import Bundle
    from manyheads.export import export_bundle

    out = folder.with_name(f"{folder.name}-onnx-{quantization}")
    if not (out / "bundle.json").exists():
        export_bundle(Bundle.load(folder, cache=None), out, int8=quantization == "int8")
    return out


def in_tree(tree: Path, code: str, *args: str) -> dict[str, Any]:
    """Run ``code`` (its arguments ``args``) in a fresh process on the checkout ``tree``
    (its ``src/`` first on the path), offline; the JSON object of its last line, whose
    ``file`` (``manyheads.__file__``) must come from that tree."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True
    )
    found: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["file"].startswith(str(tree)), found["file"]
    return found
