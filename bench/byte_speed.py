"""Byte trunk throughput: the `content` bundle by tier, and the trunk's shapes side by side.

1. the built-in `content` bundle (every head, onnxruntime, no torch in the path)
   at each tier it holds heads for: `Bundle.predict` over 2,000 texts of 1 KB
   (1,024 UTF-8 bytes: half source-code snippets of ../shared/data/code, half
   Debian descriptions in their 30 languages, each repeated to 1 KB), batch 64,
   best of 3; texts/s and the ratio to the 2,000 texts/s bar; the trunk alone
   (`encode`) beside it;
2. shapes: trunks with random weights (speed does not depend on training) of
   the content bundle's config and variations of it, encoding the same texts,
   best of 3, ratio to the content config.

Both sections run in one process, alternating nothing else: the machine's
speed drifts, so compare within a run.
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
    "no attention": {"heads": 0},
    "no hashed n-grams": {"ngrams": 0},
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


def best(fn: Any, n: int, repeat: int = 3) -> float:
    fn()
    rate = 0.0
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        rate = max(rate, n / (time.perf_counter() - t))
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", default="content")
    ap.add_argument("--texts", type=int, default=2000)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    from _common import machine, write_json

    from manyheads import Bundle
    from manyheads.trunks.byte import ByteConfig, ByteTrunk, _build_module

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
    for tier in tiers:
        b = (
            Bundle.load(args.bundle, cache=None, tier=tier)
            if tier != main_bundle.trunk.dim
            else main_bundle
        )
        heads = list(b.heads)
        rate = best(lambda b=b: b.predict(texts), len(texts))
        trunk_rate = best(lambda b=b: b.trunk.encode(texts), len(texts))
        results["tiers"][tier] = {
            "texts_per_s": rate,
            "trunk_texts_per_s": trunk_rate,
            "heads": heads,
        }
        print(
            f"{'tier ' + str(tier):22s} {rate:17.1f} {rate / 2000:8.2f}x {trunk_rate:11.1f}",
            flush=True,
        )

    print(f"\n{'shape (random weights)':22s} {'texts/s':>9s} {'vs content':>10s} {'params':>8s}")
    results["shapes"] = {}
    base = None
    for name, change in VARIANTS.items():
        cfg = ByteConfig.from_json({**config.to_json(), **change})
        module = _build_module(cfg)
        state = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
        trunk = ByteTrunk(cfg, state=state)
        trunk.save_files(Path(tempfile.mkdtemp(prefix="byte-speed-")))
        rate = best(lambda trunk=trunk: trunk.encode(texts), len(texts))
        base = base or rate
        params = sum(v.size for v in state.values())
        results["shapes"][name] = {"config": change, "texts_per_s": rate, "params": params}
        print(f"{name:22s} {rate:9.1f} {rate / base:9.2f}x {params / 1e6:7.2f}M", flush=True)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
