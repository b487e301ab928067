"""Texts/s of a MiniLM bundle with 1 and 10 heads on a GPU, against sentence-transformers
on the same GPU and texts in the same run; label agreement with the CPU float32 bundle;
peak GPU memory; where the time goes; ``label`` on a file of many rows.

One command, made to finish in under 5 minutes on a fresh GPU machine that has the
repository, torch, transformers and tokenizers, and no network::

    python bench/gpu.py --model .gpu/minilm-fp16 --out bench/results/gpu.json

``--model``: a sentence-transformers folder of all-MiniLM-L6-v2 (``python
bench/gpu_carry.py`` writes one as float16 safetensors, small enough to carry). The
texts are the repository's own Debian descriptions (``examples/``), repeated to
``--texts``. Ten heads: five trained on the examples' fields (section, library, role,
interface, implemented_in) and five made from label names (zero-shot). On a machine
without a GPU, ``--device cpu --texts 2000 --label-rows 5000`` runs every stage small.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

EXAMPLES = [
    ROOT / "examples" / "debian-en-train.jsonl.gz",
    ROOT / "examples" / "debian-en-test.jsonl.gz",
]
TRAINED = {
    "section": "multiclass",
    "library": "binary",
    "role": "multilabel",
    "interface": "multilabel",
    "implemented_in": "multilabel",
}


def read_rows() -> list[dict[str, Any]]:
    rows = []
    for path in EXAMPLES:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            rows += [json.loads(line) for line in fh]
    return rows


def sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn: Any, torch: Any, device: str) -> tuple[float, Any]:
    sync(torch, device)
    start = time.perf_counter()
    out = fn()
    sync(torch, device)
    return time.perf_counter() - start, out


def build_bundle(
    model: Path, rows: list[dict[str, Any]], device: str, n_train: int, cache: Path
) -> Any:
    """Ten heads on the model's trunk: five fitted on the examples' fields (their texts
    encoded once, through a cache), five from label names."""
    from manyheads import Bundle, TransformerTrunk

    bundle = Bundle(TransformerTrunk(model), cache=cache, device=device)
    train = rows[:n_train]
    texts = [r["text"] for r in train]
    bundle.embed(texts)
    for name, kind in TRAINED.items():
        keep = [i for i, r in enumerate(train) if kind != "multilabel" or r[name]]
        bundle.fit_head(
            name,
            [texts[i] for i in keep],
            [train[i][name] for i in keep],
            kind=kind,
            C=1.0,
        )
    sections = sorted({r["section"] for r in rows})
    roles = sorted({v for r in rows for v in r["role"]})
    interfaces = sorted({v for r in rows for v in r["interface"]})
    languages = sorted({v for r in rows for v in r["implemented_in"]})
    bundle.add_head_from_labels("section_names", sections)
    bundle.add_head_from_labels("role_names", roles, kind="multilabel")
    bundle.add_head_from_labels("interface_names", interfaces, kind="multilabel")
    bundle.add_head_from_labels("language_names", languages)
    bundle.add_head_from_labels(
        "audience",
        {
            "developers": "libraries, headers and tools for programmers",
            "users": "programs people run",
            "administrators": "daemons and system tools",
            "readers": "documentation",
        },
    )
    return bundle


def agreement(
    got: list[dict[str, Any]], want: list[dict[str, Any]], names: list[str]
) -> dict[str, float]:
    """Per head, the share of texts whose answer (label, or set of labels) is the same."""
    out = {}
    for name in names:
        same = sum(
            a[name].get("label", a[name].get("labels"))
            == b[name].get("label", b[name].get("labels"))
            for a, b in zip(got, want, strict=True)
        )
        out[name] = same / len(want)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path, help="sentence-transformers folder")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--texts", type=int, default=100_000)
    parser.add_argument(
        "--train-rows", type=int, default=5000, help="rows the five heads learn from"
    )
    parser.add_argument(
        "--cpu-check", type=int, default=2000, help="texts compared with the CPU fp32 bundle"
    )
    parser.add_argument("--label-rows", type=int, default=1_000_000, help="0: no label run")
    parser.add_argument(
        "--st-batch", type=int, default=32, help="sentence-transformers' batch (its default)"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch

    from manyheads.trunks.device import resolve_device

    device = resolve_device(args.device).torch_name
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device)
        if device.startswith("cuda")
        else platform.processor() or "cpu",
        "cpu": platform.processor(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "texts": args.texts,
    }

    def save(stage: str) -> None:
        print(f"[{stage}] " + json.dumps(results.get(stage), default=str), flush=True)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")

    rows = read_rows()
    pool = [r["text"] for r in rows]
    texts = [pool[i % len(pool)] for i in range(args.texts)]

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="manyheads-gpu-"))
    bundle = build_bundle(args.model, rows, device, args.train_rows, work / "embeddings.sqlite")
    trunk = bundle.trunk
    names = list(bundle.heads)
    n_tokens = sum(trunk.work(pool)) / len(pool)
    results["setup"] = {
        "seconds": round(time.perf_counter() - started, 1),
        "heads": len(names),
        "label_columns": int(bundle.fused_heads.W.shape[1]),
        "tokens_per_text": round(n_tokens, 1),
        "computes_in": trunk.computes_in,
    }
    save("setup")

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    bundle.predict_proba(texts[:4096], names)  # warm: kernels, the heads' layer on the device
    speed: dict[str, Any] = {}
    for label, asked in (("1_head", names[:1]), ("10_heads", names)):
        seconds, _ = timed(lambda asked=asked: bundle.predict_proba(texts, asked), torch, device)
        speed[label] = {"seconds": round(seconds, 3), "texts_per_s": round(len(texts) / seconds)}
    speed["10_over_1"] = round(speed["10_heads"]["seconds"] / speed["1_head"]["seconds"], 3)
    if device.startswith("cuda"):
        speed["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
    results["manyheads"] = speed
    save("manyheads")

    # where the time goes
    parts: dict[str, Any] = {}
    parts["tokenise_s"], _ = timed(lambda: trunk._windows(texts), torch, device)
    parts["encode_s"], vectors = timed(lambda: trunk.encode(texts), torch, device)
    fused = bundle.fused_heads
    W, b = fused.first_layer(names)
    X = torch.from_numpy(vectors).to(device)
    Wt, bt = torch.from_numpy(W).to(device), torch.from_numpy(b).to(device)
    parts["heads_product_s"], Z = timed(lambda: torch.addmm(bt, X, Wt), torch, device)
    parts["copy_back_s"], Zc = timed(lambda: Z.cpu().numpy(), torch, device)
    parts["heads_finish_cpu_s"], _ = timed(lambda: fused.from_first_layer(Zc, names), torch, device)
    parts = {k: round(v, 3) for k, v in parts.items()}
    parts["copy_back_mb"] = round(Zc.nbytes / 2**20, 1)
    results["where_time_goes"] = parts
    save("where_time_goes")

    # sentence-transformers on the same device and texts (its defaults, float32)
    try:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(args.model), device=device).float()
        st.encode(texts[:1024], batch_size=args.st_batch)
        seconds, _ = timed(
            lambda st=st: st.encode(texts, batch_size=args.st_batch, convert_to_numpy=True),
            torch,
            device,
        )
        results["sentence_transformers"] = {
            "seconds": round(seconds, 3),
            "texts_per_s": round(len(texts) / seconds),
            "batch_size": args.st_batch,
        }
        results["ratio_10_heads_vs_st"] = round(
            results["manyheads"]["10_heads"]["texts_per_s"]
            / results["sentence_transformers"]["texts_per_s"],
            2,
        )
        del st
    except ImportError as exc:
        results["sentence_transformers"] = f"not run: {exc}"
    save("sentence_transformers")

    # labels against the CPU float32 bundle, on the same texts
    from manyheads import Bundle

    folder = work / "bundle"
    bundle.save(folder)
    cpu = Bundle.load(folder, cache=None, device="cpu")
    check = pool[: args.cpu_check]
    want = cpu.predict(check, scores="none")
    got = bundle.predict(check, scores="none")
    results["agreement_vs_cpu_fp32"] = {
        k: round(v, 4) for k, v in agreement(got, want, names).items()
    }
    results["agreement_min"] = min(results["agreement_vs_cpu_fp32"].values())
    save("agreement_vs_cpu_fp32")

    if args.label_rows:
        from manyheads.label import label_file

        source = work / "rows.jsonl"
        with open(source, "w", encoding="utf-8") as fh:
            for i in range(args.label_rows):
                fh.write(json.dumps({"id": i, "text": pool[i % len(pool)]}) + "\n")
        summary = label_file(
            source, folder, work / "labelled.jsonl", device=args.device, scores="none"
        )
        rate = summary.rows / summary.seconds
        results["label"] = {
            "rows": summary.rows,
            "seconds": round(summary.seconds, 1),
            "rows_per_s": round(rate),
            "share_of_bench": round(rate / results["manyheads"]["10_heads"]["texts_per_s"], 3),
        }
        save("label")
    shutil.rmtree(work, ignore_errors=True)
    results["total_seconds"] = round(time.perf_counter() - started, 1)
    save("total_seconds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
