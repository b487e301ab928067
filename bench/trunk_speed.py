"""Trunk speed on a CPU: sentence-transformers vs the manyheads torch path vs ONNX fp32 / int8.

On real English Debian package descriptions (grouped 80/20 split), in one run:

1. trains a bundle per trunk configuration (`minilm`: 5 heads; `minilm+tfidf`:
   section + library), heads with the `manyheads train` defaults (C=auto,
   accuracy thresholds), embeddings cached in bench/.cache;
2. exports each to ONNX fp32 and int8 (`manyheads export`);
3. runs each variant in a fresh process on the same held-out texts:
   sentence-transformers fp32 `encode` (embeddings only, batch 32), the
   bundle's torch path (`Bundle.predict`, every head), the ONNX fp32 and int8
   bundles (`Bundle.predict`, every head; int8 one text per call, its
   default, and in batches, as before that default). Each process reports cold start
   (import + load + first prediction of one text), texts/s on all texts,
   peak RSS, and whether torch was imported;
4. compares every head's labels with the torch path (agreement) and the
   section head's accuracy on the held-out texts.

Prints a table with ratios to sentence-transformers. Threads: torch and
onnxruntime both use every CPU (2 here).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

HEADS = {
    "section": "multiclass",
    "library": "binary",
    "role": "multilabel",
    "interface": "multilabel",
    "implemented_in": "multilabel",
}
COMPOSITE_HEADS = ("section", "library")


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM; getrusage's maxrss would include the
    parent's, which a child inherits across exec on Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(variant: str, bundle: str | None, texts_file: str, out_file: str) -> None:
    """One variant in a fresh process: cold start, throughput, peak RSS, answers."""
    texts = json.loads(Path(texts_file).read_text())
    first = texts[:1]
    t0 = time.perf_counter()
    if variant == "st":
        from sentence_transformers import SentenceTransformer

        from manyheads.trunks import minilm_path

        model = SentenceTransformer(str(minilm_path()), device="cpu")
        model.encode(first)
        predict: Any = lambda xs: model.encode(xs, batch_size=32)  # noqa: E731
    else:
        import manyheads

        if variant == "onnx-batches":  # an int8 graph in batches (its answers move with them)
            from manyheads.trunks.onnxrt import OnnxTrunk

            OnnxTrunk.spread = "batches"
        b = manyheads.Bundle.load(bundle, cache=None)
        b.predict(first)
        predict = b.predict
    cold = time.perf_counter() - t0
    predict(texts[:16])  # warm-up
    t1 = time.perf_counter()
    answers = predict(texts)
    seconds = time.perf_counter() - t1
    peak = peak_rss_mb()
    result = {
        "variant": variant,
        "cold_start_s": cold,
        "texts_per_s": len(texts) / seconds,
        "seconds": seconds,
        "peak_rss_mb": peak,
        "torch_imported": "torch" in sys.modules,
        "sklearn_imported": "sklearn" in sys.modules,
        "answers": None if variant == "st" else answers,
    }
    Path(out_file).write_text(json.dumps(result))


def run_worker(variant: str, bundle: Path | None, texts_file: Path) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = Path(fh.name)
    cmd = [sys.executable, __file__, "--worker", variant, "--texts-file", str(texts_file)]
    cmd += ["--out", str(out)] + (["--bundle", str(bundle)] if bundle else [])
    subprocess.run(cmd, check=True)
    result: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return result


def cold_only(bundle: Path | None, variant: str, texts_file: Path) -> float:
    """Cold start of a fresh process (median of 3), without the throughput run."""
    code = (
        "import time,sys,json;t=time.perf_counter();"
        + (
            "from sentence_transformers import SentenceTransformer;"
            "from manyheads.trunks import minilm_path;"
            "m=SentenceTransformer(str(minilm_path()),device='cpu');m.encode(['x'])"
            if variant == "st"
            else f"import manyheads;manyheads.Bundle.load({str(bundle)!r},cache=None)"
            ".predict(['Python bindings for libxml2'])"
        )
        + ";print(time.perf_counter()-t)"
    )
    times = []
    for _ in range(3):
        res = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        )
        times.append(float(res.stdout.strip().splitlines()[-1]))
    return sorted(times)[1]


def agreement(kind: str, a: list[dict[str, Any]], b: list[dict[str, Any]], head: str) -> float:
    key = "labels" if kind == "multilabel" else "label"
    same = [x[head][key] == y[head][key] for x, y in zip(a, b, strict=True)]
    return sum(same) / len(same)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=5000, help="English Debian rows (grouped split)")
    ap.add_argument("--texts", type=int, default=1000, help="held-out texts to time")
    ap.add_argument("--trunks", default="minilm,minilm+tfidf")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--bundle", help=argparse.SUPPRESS)
    ap.add_argument("--texts-file", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.bundle, args.texts_file, args.out)
        return

    import numpy as np
    from _common import (
        CACHE_DIR,
        exported_bundle,
        machine,
        speed_bundle,
        speed_split,
        write_json,
    )

    from manyheads import EmbeddingCache

    print(f"machine: {machine()}")
    train, test, source = speed_split(args.rows, args.texts)
    texts = [r["text"] for r in test]
    chars = sorted(len(t) for t in texts)
    print(
        f"data: {source}, {len(train)} train / {len(test)} held-out texts, "
        f"median {chars[len(chars) // 2]} characters"
    )
    texts_file = CACHE_DIR / f"speed-texts-{len(texts)}.json"
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    texts_file.write_text(json.dumps(texts))
    cache = EmbeddingCache(CACHE_DIR / "embeddings.sqlite")
    results: dict[str, Any] = {"machine": machine(), "n_texts": len(texts), "trunks": {}}

    st = run_worker("st", None, texts_file)
    st["cold_start_s"] = cold_only(None, "st", texts_file)
    results["sentence_transformers"] = {k: v for k, v in st.items() if k != "answers"}
    rows_out = [("sentence-transformers fp32 (embeddings only)", st, None)]
    for trunk in args.trunks.split(","):
        heads = HEADS if "+" not in trunk else {h: HEADS[h] for h in COMPOSITE_HEADS}
        t = time.perf_counter()
        folder = speed_bundle(trunk, train, heads, cache)
        exported = {q: exported_bundle(folder, q) for q in ("fp32", "int8")}
        entry: dict[str, Any] = {"heads": list(heads), "variants": {}}
        entry["build_s"] = time.perf_counter() - t
        for q, out in exported.items():
            entry[f"size_{q}_mb"] = sum(f.stat().st_size for f in out.rglob("*")) / 1e6
        base = run_worker("torch", folder, texts_file)
        base["cold_start_s"] = cold_only(folder, "torch", texts_file)
        runs = {"torch": base}
        for q, out in exported.items():
            runs[q] = run_worker("onnx", out, texts_file)
            runs[q]["cold_start_s"] = cold_only(out, "onnx", texts_file)
        # the int8 graph as it ran before one text per call became its default
        runs["int8 batches"] = run_worker("onnx-batches", exported["int8"], texts_file)
        runs["int8 batches"]["cold_start_s"] = runs["int8"]["cold_start_s"]
        gold = [r["section"] for r in test]
        answers = {name: run.pop("answers") for name, run in runs.items()}
        for name, run in runs.items():
            if name != "torch":
                run["agreement"] = {
                    h: agreement(k, answers["torch"], answers[name], h) for h, k in heads.items()
                }
            run["section_accuracy"] = float(
                np.mean(
                    [a["section"]["label"] == g for a, g in zip(answers[name], gold, strict=True)]
                )
            )
            entry["variants"][name] = run
            label = {
                "torch": "torch path",
                "fp32": "ONNX fp32",
                "int8": "ONNX int8",
                "int8 batches": "ONNX int8, in batches",
            }[name]
            rows_out.append((f"manyheads {trunk}: {label}", run, trunk))
        results["trunks"][trunk] = entry

    st_rate = st["texts_per_s"]
    print()
    print(
        f"{'variant':58s} {'texts/s':>8s} {'vs ST':>6s} {'cold s':>7s} {'peak MB':>8s} "
        f"{'torch':>6s} {'sect acc':>8s}  label agreement with the torch path"
    )
    for label, run, _ in rows_out:
        agree = run.get("agreement")
        agree_s = ", ".join(f"{h} {v:.4f}" for h, v in agree.items()) if agree else "-"
        acc = run.get("section_accuracy")
        print(
            f"{label:58s} {run['texts_per_s']:8.1f} {run['texts_per_s'] / st_rate:5.2f}x "
            f"{run['cold_start_s']:7.2f} {run['peak_rss_mb']:8.0f} "
            f"{'yes' if run['torch_imported'] else 'no':>6s} "
            f"{'-' if acc is None else f'{acc:.4f}':>8s}  {agree_s}"
        )
    for trunk, entry in results["trunks"].items():
        sizes = ", ".join(f"{q} {entry[f'size_{q}_mb']:.1f} MB" for q in ("fp32", "int8"))
        print(f"{trunk}: exported bundle sizes {sizes}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
