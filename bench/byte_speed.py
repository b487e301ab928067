"""Byte trunk throughput: the `content` bundle by tier, and the trunk's shapes side by side.

1. the built-in `content` bundle (every head, onnxruntime, no torch in the path)
   at each tier it holds heads for: `Bundle.predict` over 2,000 texts of 1 KB
   (1,024 UTF-8 bytes: half source-code snippets of ../shared/data/code, half
   Debian descriptions in their 30 languages, each repeated to 1 KB), the
   trunk's default batches (32, side by side);
   texts/s and the ratio to the 2,000 texts/s bar; the trunk alone (`encode`)
   beside it; the smallest tier also at other batch sizes (`--batch-sizes`), and
   run as before batches ran side by side ("one batch at a time": each batch of 64
   over every core, `ByteTrunk.spread = "ops"`);
   `--against FOLDER`: another byte bundle in the same rounds;
2. shapes: trunks with random weights (speed does not depend on training) of
   the content bundle's config and variations of it, encoding the same texts,
   ratio to the content config; "stem as a convolution" is the content config
   with its graph's stem computed as the strided convolution it is trained as
   (the graph computes it as table lookups).

The machine's speed drifts by tens of percent over minutes, so every
measurement runs in each of `--rounds` rounds, one after the other inside a
round (round-robin), and the best round of each is reported.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SHARED = HERE.parent.parent / "shared" / "data"
VARIANTS: dict[str, dict[str, Any]] = {
    "content config": {},
    "stem as a convolution": {"_stem": "conv"},  # how graphs computed it before the lookups
    "attention (2 heads)": {"heads": 2},
    "no bag": {"bag": 0},
    "bag table float32": {"int8": False},
    "+ ngrams 8192 (convs)": {"ngrams": 8192},
    "128 channels": {"channels": 128},
    "stride 4 (stem 8)": {"stride": 4, "stem": 8},
}


def one_kb_texts(n: int) -> list[str]:
    """``n`` texts of 1,024 UTF-8 bytes: half code, half Debian descriptions."""

    def read(name: str, k: int) -> list[str]:
        out = []
        with gzip.open(SHARED / f"{name}.jsonl.gz", "rt", encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i % 7 == 0:
                    out.append(json.loads(line)["text"])
                if len(out) == k:
                    break
        return out

    out = []
    for x in read("code", n // 2) + read("debdesc", n - n // 2):
        while len(x.encode()) < 1024:
            x += "\n" + x
        out.append(x.encode()[:1024].decode("utf-8", "ignore"))
    return out


def round_robin(fns: dict[str, Any], n: int, rounds: int) -> dict[str, float]:
    """Best texts/s of each function over ``rounds`` rounds, each round running every
    function once in turn (after one warm-up call each)."""
    for fn in fns.values():
        fn()
    rates = dict.fromkeys(fns, 0.0)
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            rates[name] = max(rates[name], n / (time.perf_counter() - t))
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", default="content")
    ap.add_argument("--texts", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--against",
        action="append",
        default=[],
        help="another byte bundle (a folder) timed in the same rounds at its own tier, "
        "e.g. an earlier build (repeatable)",
    )
    ap.add_argument(
        "--batch-sizes",
        default="16,64",
        help="the smallest tier also at these batch sizes (comma-separated; the rest: "
        "the trunk's default)",
    )
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    from _common import machine, write_json

    from manyheads import Bundle
    from manyheads.trunks.byte import ByteConfig, ByteTrunk
    from manyheads.trunks.byte import model as byte

    texts = one_kb_texts(args.texts)
    assert all(len(t.encode()) <= 1024 for t in texts)
    results: dict[str, Any] = {"machine": machine(), "texts": len(texts), "tiers": {}}
    print(f"machine: {machine()}; {len(texts)} texts of 1 KB")
    main_bundle = Bundle.load(args.bundle, cache=None)
    config = main_bundle.trunk.config
    tiers = sorted({main_bundle.trunk.dim, *main_bundle.tiers})
    print(
        f"\n{'content bundle':22s} {'texts/s all heads':>17s} {'vs 2,000':>9s} {'trunk only':>11s}"
    )
    bundles = {
        tier: Bundle.load(args.bundle, cache=None, tier=tier)
        if tier != main_bundle.trunk.dim
        else main_bundle
        for tier in tiers
    }
    fns: dict[str, Any] = {}
    for tier, b in bundles.items():
        fns[f"{tier} all"] = lambda b=b: b.predict(texts)
        fns[f"{tier} trunk"] = lambda b=b: b.trunk.encode(texts)
    sizes = [int(x) for x in args.batch_sizes.split(",") if x]
    for size in sizes:
        sized = Bundle.load(args.bundle, cache=None, tier=tiers[0])
        sized.trunk.batch_size = size
        fns[f"batch {size}"] = lambda b=sized: b.predict(texts)
    ops = Bundle.load(args.bundle, cache=None, tier=tiers[0])
    ops.trunk.spread, ops.trunk.batch_size = "ops", 64
    fns["ops"] = lambda b=ops: b.predict(texts)
    others = {path: Bundle.load(path, cache=None) for path in args.against}
    for path, b in others.items():
        fns[f"against {path}"] = lambda b=b: b.predict(texts)
    rates = round_robin(fns, len(texts), args.rounds)
    for tier, b in bundles.items():
        rate, trunk_rate = rates[f"{tier} all"], rates[f"{tier} trunk"]
        results["tiers"][tier] = {
            "texts_per_s": rate,
            "trunk_texts_per_s": trunk_rate,
            "heads": list(b.heads),
        }
        print(f"{'tier ' + str(tier):22s} {rate:17.1f} {rate / 2000:8.2f}x {trunk_rate:11.1f}")
    results["batch_sizes"] = {}
    default_size, base = main_bundle.trunk.batch_size, rates[f"{tiers[0]} all"]
    for size in sizes:
        rate = rates[f"batch {size}"]
        results["batch_sizes"][size] = {"tier": tiers[0], "texts_per_s": rate}
        print(f"{f'tier {tiers[0]}, batch {size}':22s} {rate:17.1f} {rate / 2000:8.2f}x "
              f"({rate / base:.2f}x of batch {default_size})")  # fmt: skip
    rate = rates["ops"]
    results["one_batch_at_a_time"] = {"tier": tiers[0], "batch_size": 64, "texts_per_s": rate}
    print(f"{f'tier {tiers[0]}, one at a time':22s} {rate:17.1f} {rate / 2000:8.2f}x "
          f"({rate / base:.2f}x of side by side)")  # fmt: skip
    results["against"] = {}
    for path, b in others.items():
        rate, tier = rates[f"against {path}"], b.trunk.dim
        mine = rates.get(f"{tier} all")
        results["against"][path] = {"tier": tier, "texts_per_s": rate, "heads": list(b.heads)}
        vs = f"; {args.bundle} at tier {tier}: {mine / rate:.2f}x of it" if mine else ""
        print(f"against {path} (tier {tier}): {rate:.1f} texts/s{vs}")

    print(f"\n{'shape (random weights)':22s} {'texts/s':>9s} {'vs content':>10s} {'params':>8s}")
    results["shapes"] = {}
    shape_fns, params = {}, {}
    for name, change in VARIANTS.items():
        change = dict(change)
        stem = change.pop("_stem", byte.STEM)
        cfg = ByteConfig.from_json({**config.to_json(), **change})
        module = byte.build_module(cfg)
        state = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
        trunk = ByteTrunk(cfg, state=state)
        default, byte.STEM = byte.STEM, stem
        try:
            trunk.save_files(Path(tempfile.mkdtemp(prefix="byte-speed-")))
        finally:
            byte.STEM = default
        shape_fns[name] = lambda trunk=trunk: trunk.encode(texts)
        params[name] = sum(v.size for v in state.values())
    rates = round_robin(shape_fns, len(texts), args.rounds)
    base = rates["content config"]
    for name, change in VARIANTS.items():
        rate = rates[name]
        results["shapes"][name] = {"config": change, "texts_per_s": rate, "params": params[name]}
        print(f"{name:22s} {rate:9.1f} {rate / base:9.2f}x {params[name] / 1e6:7.2f}M")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
