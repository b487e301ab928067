"""Byte trunk, first look: encoding speed of its shapes and a short code-language check.

1. speed: for each shape, a trunk with random weights (speed does not depend on
   training) is saved with its ONNX graph and encodes 1,000 texts of 1 KB
   (source-code snippets of ../shared/data/code, repeated to 1,024 bytes) with
   onnxruntime, batch 64, best of 2; texts/s and the ratio to the default shape;
2. with --accuracy: each shape is trained for 3 epochs on 2,000 snippets (17
   languages) and a linear `lang` head is fitted on the frozen trunk; accuracy on
   500 snippets of other source files (grouped split), at the smallest and the
   largest tier.

This is not yet the issue's `byte_speed.py` (tiers of a trained `content` bundle,
all heads); it measures where the shapes stand.
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SHAPES: dict[str, dict[str, Any]] = {
    "default (128 ch, full attention)": {},
    "downsample=4": {"downsample": 4},
    "64 ch, downsample=8": {"channels": 64, "embed": 32, "downsample": 8},
}
CODE = HERE.parent.parent / "shared" / "data" / "code.jsonl.gz"


def code_rows() -> list[dict[str, Any]]:
    with gzip.open(CODE, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def one_kb(texts: list[str]) -> list[str]:
    out = []
    for x in texts:
        while len(x.encode()) < 1024:
            x += "\n" + x
        out.append(x.encode()[:1024].decode("utf-8", "ignore"))
    return out


def speed(shape: dict[str, Any], texts: list[str]) -> float:
    from manyheads.trunks.byte import ByteConfig, ByteTrunk, _build_module

    config = ByteConfig(**shape)
    state = {k: v.detach().numpy().copy() for k, v in _build_module(config).state_dict().items()}
    trunk = ByteTrunk(config, state=state)
    trunk.save_files(Path(tempfile.mkdtemp(prefix="byte-speed-")))
    trunk.encode(texts[:64])
    best = 0.0
    for _ in range(2):
        t = time.perf_counter()
        trunk.encode(texts, batch_size=64)
        best = max(best, len(texts) / (time.perf_counter() - t))
    return best


def accuracy(shape: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    from manyheads import Bundle
    from manyheads.trunks.byte import ByteConfig, train_byte_trunk

    groups = sorted({r["group"] for r in rows})
    random.Random(1).shuffle(groups)
    held = set(groups[: len(groups) // 5])
    shuffled = rows[:]
    random.Random(0).shuffle(shuffled)
    train = [r for r in shuffled if r["group"] not in held][:2000]
    test = [r for r in shuffled if r["group"] in held][:500]
    texts = [r["text"] for r in train]
    labels = [r["lang"] for r in train]
    config = ByteConfig(**shape)
    trunk, summary = train_byte_trunk(
        texts, {"lang": (labels, "multiclass")}, config=config, epochs=3
    )
    out: dict[str, Any] = {"train_s": summary.seconds, "losses": summary.losses}
    for tier in (config.dims[0], config.dims[-1]):
        b = Bundle(trunk=trunk.with_tier(tier), cache=None)
        b.fit_head("lang", texts, labels)
        pred = [p["lang"]["label"] for p in b.predict([r["text"] for r in test])]
        out[f"acc_{tier}"] = float(
            np.mean([p == r["lang"] for p, r in zip(pred, test, strict=True)])
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--accuracy", action="store_true", help="also train each shape (minutes)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    from _common import machine, write_json

    print(f"machine: {machine()}")
    rows = code_rows()
    texts = one_kb([r["text"] for r in rows[:1500]])[:1000]
    results: dict[str, Any] = {"machine": machine(), "shapes": {}}
    base = None
    print(f"{'shape':36s} {'texts/s (1 KB)':>14s} {'vs default':>10s}", flush=True)
    for name, shape in SHAPES.items():
        rate = speed(shape, texts)
        base = base or rate
        results["shapes"][name] = {"config": shape, "texts_per_s": rate}
        print(f"{name:36s} {rate:14.1f} {rate / base:9.2f}x", flush=True)
    if args.accuracy:
        print(
            f"\n{'shape':36s} {'train s':>8s} {'final loss':>10s} "
            f"{'acc small':>9s} {'acc large':>9s}"
        )
        for name, shape in SHAPES.items():
            if name.startswith("64 ch"):
                continue  # the two shapes compared in the README
            acc = accuracy(shape, rows)
            results["shapes"][name]["accuracy"] = acc
            keys = [k for k in acc if k.startswith("acc_")]
            print(
                f"{name:36s} {acc['train_s']:8.1f} {acc['losses'][-1]:10.3f} "
                f"{acc[keys[0]]:9.3f} {acc[keys[1]]:9.3f}",
                flush=True,
            )
    write_json(args.json, results)


if __name__ == "__main__":
    main()
