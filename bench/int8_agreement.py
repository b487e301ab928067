"""int8 that keeps its labels (issue 24): old int8 (dynamic) vs new int8 (dynamic + recheck).

On the trunk_speed bench's data and bundles (English Debian descriptions,
grouped 80/20 split, heads with the `manyheads train` defaults, built once in
bench/.cache), in one run, each variant in a fresh process on the same
held-out texts (bench/trunk_speed.py's worker):

- sentence-transformers all-MiniLM-L6-v2 fp32 `encode` (embeddings only);
- the bundle exported to ONNX fp32;
- old int8: onnxruntime dynamic quantisation alone (`export --int8 --no-recheck`,
  which writes what `--int8` wrote before);
- new int8: the same int8 graph plus the float graph kept beside it, and texts
  some head answers within its calibrated margin answered again by the float
  graph (`export --int8`, the default now).

Reports texts/s, the ratio to sentence-transformers, section accuracy, every
head's label agreement with ONNX fp32 (which agrees with the torch path:
bench/trunk_speed.py), and the share of texts the new int8 answered again.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from trunk_speed import COMPOSITE_HEADS, HEADS, agreement, run_worker  # noqa: E402


def cpu() -> dict[str, Any]:
    """The CPU's model name and whether it has AVX-512 VNNI (int8 dot products)."""
    model = "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return {
        "model": model,
        "avx512_vnni": "avx512_vnni" in flags,
        "avx2": "avx2" in flags,
        "machine": platform.machine(),
    }


def exported(folder: Path, name: str, **options: Any) -> tuple[Path, float]:
    """``folder`` exported with ``options`` into ``folder-name`` (built once), and the
    export's seconds (0 when it was already there)."""
    from manyheads import Bundle
    from manyheads.export import export_bundle

    out = folder.with_name(f"{folder.name}-{name}")
    if (out / "bundle.json").exists():
        return out, 0.0
    t = time.perf_counter()
    export_bundle(Bundle.load(folder, cache=None), out, **options)
    return out, time.perf_counter() - t


def rechecked_share(folder: Path, answers: list[dict[str, Any]]) -> float:
    """Share of texts the new int8 bundle at ``folder`` answers again: its recheck rule
    applied to the int8 graph's answers (``answers``, every class's score)."""
    import numpy as np

    from manyheads import Bundle
    from manyheads.bundle.recheck import decision_gaps

    b = Bundle.load(folder, cache=None)
    fused = b.fused_heads
    assert fused is not None
    part = next(p for p in b.trunk.parts if getattr(p, "recheck", None))
    margins = part.recheck_margins({n: s.digest for n, s in fused.specs.items()})
    unsure = np.zeros(len(answers), dtype=bool)
    for name, margin in margins.items():
        labels = fused.specs[name].labels
        probs = np.array([[a[name]["scores"][str(lab)] for lab in labels] for a in answers])
        unsure |= decision_gaps(fused.specs[name], probs) < margin
    return float(unsure.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=5000, help="English Debian rows (grouped split)")
    ap.add_argument("--texts", type=int, default=1000, help="held-out texts to time")
    ap.add_argument("--trunks", default="minilm+tfidf", help="comma-separated trunks")
    ap.add_argument(
        "--recheck-quantile", type=float, default=None, help="export's recheck_quantile"
    )
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()

    import numpy as np
    from _common import CACHE_DIR, speed_bundle, speed_split, write_json

    from manyheads import EmbeddingCache

    info = cpu()
    print(f"CPU: {info['model']}, avx512_vnni {'yes' if info['avx512_vnni'] else 'no'}")
    train, test, source = speed_split(args.rows, args.texts)
    texts = [r["text"] for r in test]
    print(f"data: {source}, {len(train)} train / {len(test)} held-out texts")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    texts_file = CACHE_DIR / f"speed-texts-{len(texts)}.json"
    texts_file.write_text(json.dumps(texts))
    cache = EmbeddingCache(CACHE_DIR / "embeddings.sqlite")
    gold = [r["section"] for r in test]
    results: dict[str, Any] = {"cpu": info, "n_texts": len(texts), "trunks": {}}

    first = run_worker("st", None, texts_file)
    rows_out: list[tuple[str, dict[str, Any]]] = []
    quantile = {} if args.recheck_quantile is None else {"recheck_quantile": args.recheck_quantile}
    results["recheck_quantile"] = args.recheck_quantile
    for trunk in args.trunks.split(","):
        heads = HEADS if "+" not in trunk else {h: HEADS[h] for h in COMPOSITE_HEADS}
        folder = speed_bundle(trunk, train, heads, cache)
        bundles = {
            "ONNX fp32": exported(folder, "onnx-fp32"),
            "old int8 (dynamic)": exported(folder, "int8-dynamic", int8=True, recheck=False),
            "new int8 (dynamic + recheck)": exported(
                folder, f"int8-recheck{args.recheck_quantile or ''}", int8=True, **quantile
            ),
        }
        runs = {name: run_worker("onnx", out, texts_file) for name, (out, _) in bundles.items()}
        answers = {name: run.pop("answers") for name, run in runs.items()}
        entry: dict[str, Any] = {"heads": list(heads), "variants": {}}
        for name, run in runs.items():
            out, seconds = bundles[name]
            run["agreement_with_fp32"] = {
                h: agreement(k, answers["ONNX fp32"], answers[name], h) for h, k in heads.items()
            }
            hits = [a["section"]["label"] == g for a, g in zip(answers[name], gold, strict=True)]
            run["section_accuracy"] = float(np.mean(hits))
            run["size_mb"] = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 1e6
            run["export_s"] = seconds
            entry["variants"][name] = run
            rows_out.append((f"{trunk}: {name}", run))
        new = "new int8 (dynamic + recheck)"
        share = rechecked_share(bundles[new][0], answers["old int8 (dynamic)"])
        entry["variants"][new]["rechecked_share"] = share
        results["trunks"][trunk] = entry

    # sentence-transformers before and after the rest (the machine is shared): the
    # faster of the two is the ratios' base, which can only make them smaller
    last = run_worker("st", None, texts_file)
    st = max(first, last, key=lambda r: r["texts_per_s"])
    st.pop("answers")
    results["sentence_transformers"] = st
    results["sentence_transformers_runs_texts_per_s"] = [r["texts_per_s"] for r in (first, last)]
    for entry in results["trunks"].values():
        for run in entry["variants"].values():
            run["vs_st"] = run["texts_per_s"] / st["texts_per_s"]
    rows_out.insert(0, ("sentence-transformers fp32", st))
    st_rate = st["texts_per_s"]
    print(
        f"sentence-transformers runs: {first['texts_per_s']:.1f}, {last['texts_per_s']:.1f} texts/s"
    )
    print()
    print(
        f"{'variant':46s} {'texts/s':>8s} {'vs ST':>6s} {'sect acc':>8s} {'MB':>6s}  "
        "agreement with ONNX fp32"
    )
    for label, run in rows_out:
        agree = run.get("agreement_with_fp32")
        agree_s = ", ".join(f"{h} {v:.4f}" for h, v in agree.items()) if agree else "-"
        acc = run.get("section_accuracy")
        size = run.get("size_mb")
        print(
            f"{label:46s} {run['texts_per_s']:8.1f} {run['texts_per_s'] / st_rate:5.2f}x "
            f"{'-' if acc is None else f'{acc:.4f}':>8s} "
            f"{'-' if size is None else f'{size:.1f}':>6s}  {agree_s}"
        )
    for trunk, entry in results["trunks"].items():
        share = entry["variants"]["new int8 (dynamic + recheck)"]["rechecked_share"]
        print(f"{trunk}: new int8 answered {share:.1%} of the texts again with the float graph")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
