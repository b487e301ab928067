"""The fast end of the trade-off: static, n-gram and fast trunks against sentence-transformers.

On the same 2,000 held-out English Debian descriptions, in one process, one run:

- sentence-transformers all-MiniLM-L6-v2 fp32 ``encode`` (batch 32, embeddings only);
- bundles with 10 heads (section, priority: multiclass; library, doc, devel: binary;
  role, implemented_in, interface, use, tags: multilabel) on the trunks ``static``,
  ``fast`` (``static+ngram``), ``ngram``, ``tfidf`` and the default ``minilm+tfidf``
  (torch path): ``Bundle.predict`` of every head, no embedding cache;
- the n-gram parts alone (``ngram`` vs ``tfidf``, scikit-learn's hashing) on the same
  texts and on texts of exactly 400 characters.

Heads use C=1 (the speed of a head does not depend on its C). Warm: each variant
predicts 64 texts first; the figure is the best of ``--repeat`` passes (one pass for
sentence-transformers and the default trunk, which take minutes). Ratios are to
sentence-transformers in the same run.

    .venv/bin/python bench/fast_trunks.py [--texts 2000] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import numpy as np
from _common import best_of, machine, speed_split, write_json

HEADS = {
    "section": "multiclass",
    "priority": "multiclass",
    "library": "binary",
    "doc": "binary",
    "devel": "binary",
    "role": "multilabel",
    "implemented_in": "multilabel",
    "interface": "multilabel",
    "use": "multilabel",
    "tags": "multilabel",
}
TRUNKS = ("static", "fast", "ngram", "tfidf", "minilm+tfidf")


def cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown CPU"
    lines = out.splitlines()
    model = next((ln.split(":", 1)[1].strip() for ln in lines if "Model name" in ln), "?")
    vnni = "avx512_vnni" in out or "avx_vnni" in out
    return f"{model}, {'VNNI' if vnni else 'no VNNI'}"


def labels(rows: list[dict[str, Any]], head: str) -> list[Any]:
    if head == "library":
        return ["yes" if r["section"] in ("libs", "libdevel") else "no" for r in rows]
    if head == "doc":
        return ["yes" if r["section"] == "doc" else "no" for r in rows]
    if head == "devel":
        return ["yes" if str(r["section"]).endswith("devel") else "no" for r in rows]
    if HEADS[head] == "multilabel":
        return [list(r.get(head) or []) for r in rows]
    return [r.get(head) or "none" for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--texts", type=int, default=2000)
    ap.add_argument("--train", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trunks", default=",".join(TRUNKS))
    ap.add_argument("--json")
    args = ap.parse_args()
    from manyheads import Bundle, EmbeddingCache
    from manyheads.trunks import load_trunk, minilm_path

    print(f"machine: {machine()}; {cpu()}")
    train, test, source = speed_split(max(5 * args.texts, 5000), args.texts)
    train = train[: args.train]
    texts = [r["text"] for r in test]
    chars = [len(t) for t in texts]
    print(f"data: {source}; {len(train)} training rows, {len(texts)} held-out texts "
          f"(median {np.median(chars):.0f} characters)")  # fmt: skip
    results: dict[str, Any] = {"machine": machine(), "cpu": cpu(), "texts": len(texts)}

    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(minilm_path()), device="cpu")
    st.encode(texts[:64], batch_size=32)
    t = time.perf_counter()
    st.encode(texts, batch_size=32)
    st_rate = len(texts) / (time.perf_counter() - t)
    rows = [("sentence-transformers fp32 (embeddings only)", st_rate)]
    print(f"sentence-transformers: {st_rate:.1f} texts/s")

    cache = EmbeddingCache(os.path.join(os.path.dirname(__file__), ".cache", "embeddings.sqlite"))
    train_texts = [r["text"] for r in train]
    for trunk in args.trunks.split(","):
        bundle = Bundle(trunk=trunk, cache=cache)
        t = time.perf_counter()
        for head, kind in HEADS.items():
            bundle.fit_head(head, train_texts, labels(train, head), kind=kind, C=1.0)
        fit_s = time.perf_counter() - t
        bundle.predict(texts[:64])
        repeat = 1 if "minilm" in trunk else args.repeat
        seconds = best_of(lambda b=bundle: b.predict(texts), repeat)
        rate = len(texts) / seconds
        rows.append((f"`{trunk}`, {len(HEADS)} heads", rate))
        print(f"{trunk}: {rate:.1f} texts/s ({rate / st_rate:.1f}x ST); 10 heads fitted in "
              f"{fit_s:.0f} s")  # fmt: skip
        results.setdefault("fit_s", {})[trunk] = fit_s

    sized = [(t * (400 // max(len(t), 1) + 1))[:400] for t in texts]
    for name in ("ngram", "tfidf"):
        part = load_trunk(name).fit(train_texts)
        for label, batch in (("descriptions", texts), ("400 characters", sized)):
            part.encode_features(batch[:64])
            rate = len(batch) / best_of(lambda p=part, b=batch: p.encode_features(b), args.repeat)
            rows.append((f"`{name}` part alone, {label}", rate))
            print(f"{name} part, {label}: {rate:.0f} texts/s")

    print("\n| variant | texts/s | vs ST |\n|---|---:|---:|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.1f} | {rate / st_rate:.1f}x |")
    results["rows"] = [{"variant": n, "texts_per_s": r, "vs_st": r / st_rate} for n, r in rows]
    write_json(args.json, results)


if __name__ == "__main__":
    main()
