"""An exported transformer bundle run in batches vs one text per call side by side,
fp32 and int8, in one run: texts/s and whether a text's answer depends on its batch.

    bash scripts/quickstart.sh        # writes out/debian (the README's main command)
    .venv/bin/python bench/onnx_spread.py [--bundle out/debian] [--json FILE]

The bundle is exported twice (fp32, int8) into a temporary folder. For each
graph and each kind of text (short UI strings from gettext's English
originals, Debian descriptions, descriptions over 1,200 characters), the two
spreads of ``OnnxTrunk`` run the same texts with every head of the bundle,
alternating, best of ``--rounds``:

- ``batches``: length-sorted batches one after another, every core inside each;
- ``texts``: each text a call of its own, side by side, one core each.

Then the share of texts whose label (any head; a multilabel head's label set)
differs between the ``batches`` answer and the text predicted alone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
DATA = ROOT.parent / "shared" / "data"


def texts_by_kind(n_short: int, n_desc: int, n_long: int) -> dict[str, list[str]]:
    rng = random.Random(0)
    with gzip.open(DATA / "gettext.jsonl.gz", "rt", encoding="utf-8") as fh:
        ui = list(dict.fromkeys(s for s in (json.loads(x).get("source_en") for x in fh) if s))
    with gzip.open(DATA / "debdesc.jsonl.gz", "rt", encoding="utf-8") as fh:
        deb = [r["text"] for r in map(json.loads, fh) if r["lang"] == "en"]
    rng.shuffle(ui)
    rng.shuffle(deb)
    return {
        "short UI strings": ui[:n_short],
        "descriptions": deb[:n_desc],
        "descriptions > 1,200 chars": [t for t in deb if len(t) > 1200][:n_long],
    }


def labels(answers: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        tuple(
            a[h]["label"] if "label" in a[h] else tuple(sorted(map(str, a[h]["labels"])))
            for h in sorted(a)
        )
        for a in answers
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", type=Path, default=ROOT / "out" / "debian")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--short", type=int, default=2000)
    ap.add_argument("--descriptions", type=int, default=800)
    ap.add_argument("--long", type=int, default=200)
    ap.add_argument("--agreement", type=int, default=500, help="texts predicted alone")
    ap.add_argument("--json")
    args = ap.parse_args()
    from _common import machine, write_json

    from manyheads import Bundle
    from manyheads.export import export_bundle
    from manyheads.trunks.onnxrt import OnnxTrunk, cpu_threads

    if not (args.bundle / "bundle.json").is_file():
        sys.exit(f"onnx_spread: no bundle at {args.bundle}; run bash scripts/quickstart.sh first")
    kinds = texts_by_kind(args.short, args.descriptions, args.long)
    print(f"machine: {machine()}; {cpu_threads()} threads")
    print(
        {k: (len(v), int(np.median([len(t) for t in v]))) for k, v in kinds.items()},
        "(texts, median chars)",
    )
    source = Bundle.load(args.bundle, cache=None)
    results: dict[str, Any] = {"machine": machine(), "bundle": str(args.bundle), "graphs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for graph, int8 in (("fp32", False), ("int8", True)):
            export_bundle(source, Path(tmp) / graph, int8=int8)
            b = Bundle.load(Path(tmp) / graph, cache=None)
            parts = getattr(b.trunk, "parts", [b.trunk])
            onnx = next(p for p in parts if isinstance(p, OnnxTrunk))
            out: dict[str, Any] = {"auto": onnx.resolved_spread()}
            for kind, texts in kinds.items():
                best = {"batches": 0.0, "texts": 0.0}
                b.predict(texts[:8])
                for _ in range(args.rounds):
                    for spread in best:
                        onnx.spread = spread
                        t0 = time.perf_counter()
                        b.predict(texts)
                        best[spread] = max(best[spread], len(texts) / (time.perf_counter() - t0))
                onnx.spread = "batches"
                some = texts[: args.agreement]
                together = labels(b.predict(some))
                alone = labels([b.predict([t])[0] for t in some])
                moved = float(np.mean([a != c for a, c in zip(together, alone, strict=True)]))
                ratio = best["texts"] / best["batches"]
                out[kind] = {**best, "texts_over_batches": ratio, "labels_moved_in_batches": moved}
                print(
                    f"{graph:5s} {kind:28s} batches {best['batches']:7.1f}/s  texts "
                    f"{best['texts']:7.1f}/s  x{ratio:.2f}   labels that move in a batch: "
                    f"{moved:.1%} of {len(some)}",
                    flush=True,
                )
                onnx.spread = "auto"
            results["graphs"][graph] = out
    write_json(args.json, results)


if __name__ == "__main__":
    main()
