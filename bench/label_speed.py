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

``--per-core``: instead, the Ray engine per worker core against the local engine, on
``--rows`` rows (>= 200,000 for the bar): each engine labels the first
``--small-rows`` rows and all ``--rows`` rows, file to file, ``--repeat`` times taking
turns (the fastest of each kept); steady-state rows/s is
the rows between the two runs over the time between them ((n2 - n1) / (t2 - t1)),
start-up what the small run took beyond its rows at that rate. Ray's own start
(``ray.init``) is timed apart. Per core: steady rows/s over the cores each engine
ran on (the local engine: one process, its trunk on every CPU; Ray: ``num_cpus``
CPUs, one actor a CPU). Then the whole command as a user runs it, ``manyheads label``
and ``manyheads label --engine ray`` (Ray started by the command) on the small file.
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


def per_core(args: argparse.Namespace) -> None:
    import ray
    from _common import CACHE_DIR, corpus_rows, machine, write_json

    from manyheads.label import label_file
    from manyheads.label.ray_engine import label_with_ray

    cpus = os.cpu_count() or 1
    print(f"machine: {machine()}")
    work = CACHE_DIR / "label-per-core"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows = corpus_rows("debdesc", args.rows)
    sizes = (args.small_rows, len(rows))
    print(f"data: ../shared/data/debdesc.jsonl.gz, {len(rows):,} rows; runs of {sizes}")
    files = {n: write_rows(work / f"in-{n}.jsonl", rows[:n]) for n in sizes}
    results: dict[str, Any] = {"machine": machine(), "rows": list(sizes), "cpus": cpus}

    def local(n: int) -> float:
        out = work / "out-local.jsonl"
        s = label_file(files[n], args.bundle, out)
        out.unlink()
        return s.seconds

    def on_ray(n: int) -> float:
        s = label_with_ray(files[n], args.bundle, work / "out-ray", output_format="jsonl")
        shutil.rmtree(work / "out-ray")
        return s.seconds

    started = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    results["ray_init_s"] = time.perf_counter() - started
    on_ray(sizes[0])  # warm: Ray's workers and imports, as a long-lived cluster has them
    engines = (("local", local), ("ray", on_ray))
    # each run twice, the engines taking turns (the machine's speed drifts): the best
    seconds = {name: [float("inf"), float("inf")] for name, _ in engines}
    for _ in range(args.repeat):
        for i, n in enumerate(sizes):
            for name, fn in engines:
                seconds[name][i] = min(seconds[name][i], fn(n))
    for name, _ in engines:
        t1, t2 = seconds[name]
        steady = (sizes[1] - sizes[0]) / (t2 - t1)
        entry = {
            "seconds": [t1, t2],
            "whole_rows_s": sizes[1] / t2,
            "steady_rows_s": steady,
            "startup_s": t1 - sizes[0] / steady,
            "cores": cpus,
            "steady_per_core": steady / cpus,
        }
        results[name] = entry
    ray.shutdown()
    ratio = results["ray"]["steady_per_core"] / results["local"]["steady_per_core"]
    results["ray_vs_local_per_core"] = ratio

    cli = [str(Path(sys.executable).with_name("manyheads")), "label"]
    whole = {}
    for name, extra in (("local", []), ("ray", ["--engine", "ray"])):
        out = work / f"cli-{name}"
        shutil.rmtree(out, ignore_errors=True)
        out.unlink(missing_ok=True)
        target = str(out) if extra else str(out) + ".jsonl"
        t = time.perf_counter()
        subprocess.run(
            [*cli, str(files[sizes[0]]), "-b", args.bundle, "-o", target, *extra],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        whole[name] = sizes[0] / (time.perf_counter() - t)
    results["cli_rows_s"] = whole

    print(f"\n{args.bundle} bundle; Ray's start (ray.init) {results['ray_init_s']:.1f} s, apart")
    print(f"{'engine':8} {'n1 s':>7} {'n2 s':>7} {'whole rows/s':>13} {'steady rows/s':>14} "
          f"{'start-up s':>11} {'per core':>9}")  # fmt: skip
    for name in ("local", "ray"):
        e = results[name]
        print(
            f"{name:8} {e['seconds'][0]:7.1f} {e['seconds'][1]:7.1f} {e['whole_rows_s']:13,.0f} "
            f"{e['steady_rows_s']:14,.0f} {e['startup_s']:11.1f} {e['steady_per_core']:9,.0f}"
        )
    print(f"Ray per core vs local per core, steady state: {ratio:.2f}x (bar 0.8x)")
    print(
        f"whole command on {sizes[0]:,} rows (CLI, Ray started by it): local "
        f"{whole['local']:,.0f} rows/s, ray {whole['ray']:,.0f} rows/s, "
        f"{whole['ray'] / whole['local']:.2f}x"
    )
    shutil.rmtree(work, ignore_errors=True)
    write_json(args.json, results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000, help="rows for the content bundle")
    ap.add_argument("--minilm-rows", type=int, default=4_000, help="rows for minilm+tfidf")
    ap.add_argument("--small-rows", type=int, default=10_000, help="rows of the smaller RSS run")
    ap.add_argument("--no-minilm", action="store_true", help="the content bundle only")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--per-core", action="store_true", help="Ray per core (see the text)")
    ap.add_argument("--bundle", default="content", help="the bundle of --per-core")
    ap.add_argument("--repeat", type=int, default=2, help="--per-core: runs of each, the best")
    args = ap.parse_args()
    if args.per_core:
        per_core(args)
        return

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
