"""Labelling big files: the local engine and Ray Data next to `Bundle.predict` in memory.

For each bundle, on the same real texts (Debian descriptions of ../shared/data, all 30
languages, as JSONL rows `{"id", "text", "lang"}`):

- `Bundle.predict` over the texts already in memory, 256 at a time, the answers the
  job writes (`scores="top"`) (the ceiling: no file read or written, the bundle loaded
  before the clock starts);
- `manyheads.label.label_file` (the local engine), file to file, loading included:
  one process, and `--workers 2`;
- `manyheads.label.label_with_ray` on a local Ray (2 CPUs, started before the clock),
  file to folder, its actors loading the bundle included;

and prints rows/s with the ratios (local / predict, Ray / local). Bundles: the
built-in `content` (byte trunk, onnxruntime) on `--rows` rows, and a `minilm+tfidf`
bundle of the speed benches exported to int8 ONNX (how a transformer bundle is best
run over a corpus) on `--minilm-rows` rows: MiniLM answers about 100 texts/s on two
cores, so 100,000 rows would take half an hour a run.

Peak memory: `label_file` with the content bundle in a fresh process over the first
10,000 and all `--rows` rows (JSONL in, JSONL out), its peak RSS (`VmHWM`, Linux) and
the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# VmHWM, the peak RSS of this program since it started: ru_maxrss would count the
# bench's own memory, copied into the child by fork before exec
RSS_CHILD = """
import sys
from manyheads.label import label_file
s = label_file(sys.argv[1], "content", sys.argv[2])
peak = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(s.rows, peak)
"""


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for i, r in enumerate(rows):
            row = {"id": i, "text": r["text"], "lang": r.get("lang")}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def predict_in_memory(bundle_path: str | Path, texts: list[str]) -> float:
    from manyheads import Bundle

    bundle = Bundle.load(bundle_path, cache=None)
    bundle.predict(texts[:256], scores="top")  # warm
    started = time.perf_counter()
    for i in range(0, len(texts), 256):
        bundle.predict(texts[i : i + 256], scores="top")  # the answers the job writes
    return len(texts) / (time.perf_counter() - started)


def peak_rss(source: Path, out: Path) -> tuple[int, float]:
    """Rows labelled and peak RSS (MiB) of ``label_file`` in a fresh process."""
    shutil.rmtree(out, ignore_errors=True)
    out.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", RSS_CHILD, str(source), str(out)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    rows, kib = done.stdout.split()
    return int(rows), int(kib) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000, help="rows for the content bundle")
    ap.add_argument("--minilm-rows", type=int, default=4_000, help="rows for minilm+tfidf")
    ap.add_argument("--small-rows", type=int, default=10_000, help="rows of the smaller RSS run")
    ap.add_argument("--no-minilm", action="store_true", help="the content bundle only")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()

    import ray
    from _common import (
        CACHE_DIR,
        corpus_rows,
        exported_bundle,
        machine,
        speed_bundle,
        speed_split,
        write_json,
    )

    from manyheads import EmbeddingCache
    from manyheads.label import label_file
    from manyheads.label.ray_engine import label_with_ray

    print(f"machine: {machine()}")
    work = CACHE_DIR / "label"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows = corpus_rows("debdesc", args.rows)
    chars = sorted(len(r["text"]) for r in rows)
    print(
        f"data: ../shared/data/debdesc.jsonl.gz, {len(rows):,} rows, "
        f"{len({r.get('lang') for r in rows})} languages, median {chars[len(chars) // 2]} chars"
    )
    bundles: list[tuple[str, str | Path, int]] = [("content", "content", len(rows))]
    if not args.no_minilm:
        train, _, _ = speed_split(5000, 1000)  # trunk_speed.py's bundle, built once
        cache = EmbeddingCache(CACHE_DIR / "embeddings.sqlite")
        folder = speed_bundle("minilm+tfidf", train, {"section": "multiclass",
                                                      "library": "binary"}, cache)  # fmt: skip
        bundles.append(("minilm+tfidf int8", exported_bundle(folder, "int8"), args.minilm_rows))

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    results: dict[str, Any] = {"machine": machine(), "bundles": {}}
    for name, bundle, n in bundles:
        source = write_rows(work / f"in-{n}.jsonl", rows[:n])
        texts = [r["text"] for r in rows[:n]]
        entry: dict[str, Any] = {"rows": n}
        entry["predict_rows_s"] = predict_in_memory(bundle, texts)
        for workers in (1, 2):
            out = work / f"out-{workers}.jsonl"
            s = label_file(source, bundle, out, workers=workers)
            entry[f"local_w{workers}_rows_s"] = s.rows_per_second
            out.unlink()
        s = label_with_ray(source, bundle, work / "ray-out", output_format="jsonl")
        entry["ray_rows_s"] = s.rows_per_second
        shutil.rmtree(work / "ray-out")
        best_local = max(entry["local_w1_rows_s"], entry["local_w2_rows_s"])
        entry["local_vs_predict"] = best_local / entry["predict_rows_s"]
        entry["ray_vs_local"] = entry["ray_rows_s"] / best_local
        results["bundles"][name] = entry
        print(f"\n{name}, {n:,} rows (rows/s; ratio)")
        print(f"  Bundle.predict in memory     {entry['predict_rows_s']:9,.0f}   1.00x")
        for workers in (1, 2):
            v = entry[f"local_w{workers}_rows_s"]
            ratio = v / entry["predict_rows_s"]
            print(f"  local, {workers} process(es)       {v:9,.0f}   {ratio:.2f}x")
        print(
            f"  Ray Data, 2 CPUs             {entry['ray_rows_s']:9,.0f}   "
            f"{entry['ray_rows_s'] / entry['predict_rows_s']:.2f}x "
            f"({entry['ray_vs_local']:.2f}x the best local)"
        )
    ray.shutdown()

    small = write_rows(work / "rss-small.jsonl", rows[: args.small_rows])
    big = work / f"in-{len(rows)}.jsonl"
    n_small, rss_small = peak_rss(small, work / "rss-out.jsonl")
    n_big, rss_big = peak_rss(big, work / "rss-out.jsonl")
    results["rss"] = {"rows": [n_small, n_big], "mib": [rss_small, rss_big]}
    print("\npeak RSS, label_file with the content bundle (fresh process each)")
    print(f"  {n_small:>7,} rows   {rss_small:7.1f} MiB")
    print(f"  {n_big:>7,} rows   {rss_big:7.1f} MiB   {rss_big / rss_small:.2f}x")
    results["rss"]["ratio"] = rss_big / rss_small
    shutil.rmtree(work, ignore_errors=True)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
