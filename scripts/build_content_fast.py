"""Build the built-in ``content-fast`` bundle (``src/manyheads/models/content-fast``).

    .venv/bin/python scripts/build_content_bundle.py --rows bench/.cache/content_rows.jsonl.gz
    .venv/bin/python scripts/build_content_fast.py [--rows bench/.cache/content_rows.jsonl.gz]

The fast tier of ``content``: the same four heads (names, kinds, labels) on the
``ngram`` trunk (hashed character 1-5-grams, sublinear tf, idf, 16,384 buckets;
numpy, no graph) instead of the byte trunk. Rows and split are those
``build_content_bundle.py --rows`` wrote (the rows ``content`` was built from):
the idf is fitted on every train text; each head learns from the same train
rows as ``content``'s (``head_rows``: at most ``--head-rows`` rows, ``language``
with at most ``--zxx-per-kind`` zxx rows of each kind and balanced class
weights), except that ``code_language`` too takes ``--head-rows`` rows, not
every train row (C=auto over 140,000 rows of 16,384 columns is too slow on 2
cores). C is chosen per head on the validation part (``C="auto"``: factors of
4 from 1 while the calibrated log-loss falls) with the first ``--c-rows`` rows,
then the head is fitted on all its rows at that C and calibrated on the
validation part. Test scores go to ``SOURCES.json``. The same rows give the
same bundle.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from build_content_bundle import TASKS, drop_locks, evaluate, head_names, head_rows  # noqa: E402

from manyheads import Bundle  # noqa: E402

BALANCED = {"language"}  # as content: zxx rows outnumber each language's


def read_rows(path: Path) -> list[dict]:
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


PRECISE = {"risk"}  # as content: thresholds at F0.5 (a false alarm costs more than a miss)


def fit(bundle: Bundle, name: str, train: list[dict], val: list[dict], C: object) -> float:
    """Fit head ``name`` on ``train`` at ``C``, calibrated on ``val``; the C it used."""
    bundle.fit_head(
        name,
        [r["text"] for r in train],
        [r[name] for r in train],
        kind=TASKS[name],
        val_texts=[r["text"] for r in val],
        val_labels=[r[name] for r in val],
        C=C,  # type: ignore[arg-type]
        thresholds="f0.5" if name in PRECISE else "f1",
        class_weight="balanced" if name in BALANCED else None,
        keep_data=False,
    )
    return float(bundle.heads[name].C_)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=Path, default=ROOT / "bench" / ".cache" / "content_rows.jsonl.gz")
    p.add_argument(
        "--out", type=Path, default=ROOT / "src" / "manyheads" / "models" / "content-fast"
    )
    p.add_argument("--head-rows", type=int, default=40_000)
    p.add_argument("--zxx-per-kind", type=int, default=5000)
    p.add_argument(
        "--c-rows", type=int, default=8000, help="rows C is chosen on (C=auto), per head"
    )
    p.add_argument(
        "--C",
        type=float,
        default=None,
        help="fit every head at this C instead of choosing it on --c-rows rows",
    )
    p.add_argument(
        "--all-rows-heads",
        default="risk",
        help="heads fitted on every train row with their label, not --head-rows of them "
        "(comma-separated; risk: the short shapes are ~5%% of the rows)",
    )
    args = p.parse_args(argv)
    all_rows = set(head_names("--all-rows-heads", args.all_rows_heads))
    if not args.rows.is_file():
        raise SystemExit(
            f"no rows at {args.rows}: write them with scripts/build_content_bundle.py --rows"
        )
    t0 = time.perf_counter()
    rows = read_rows(args.rows)
    part = {s: [r for r in rows if r["split"] == s] for s in ("train", "val", "test")}
    train = part["train"]
    bundle = Bundle(trunk="ngram", cache=None)
    bundle.fit_trunk([r["text"] for r in train])
    chosen: dict[str, dict] = {}
    for name in TASKS:
        most = None if name in all_rows else args.head_rows
        tr = head_rows(train, name, most, args.zxx_per_kind)
        va = [r for r in part["val"] if r[name] is not None][: args.head_rows // 4]
        t1 = time.perf_counter()
        if args.C is None:
            C = fit(bundle, name, tr[: args.c_rows], va[: args.c_rows // 4], "auto")
        else:
            C = args.C
        fit(bundle, name, tr, va, C)
        info = {"rows": len(tr), "val_rows": len(va), "C": C}
        chosen[name] = {**info, "seconds": round(time.perf_counter() - t1, 1)}
        print(f"head {name}: {json.dumps(chosen[name])}", flush=True)
    scores = evaluate(bundle, part["test"])
    print(f"test: {json.dumps(scores)}", flush=True)
    from manyheads._io import atomic_write_text

    bundle.save(args.out)
    sources = {
        "built_by": "scripts/build_content_fast.py",
        "rows": str(args.rows.relative_to(ROOT) if args.rows.is_relative_to(ROOT) else args.rows),
        "n": {s: len(v) for s, v in part.items()},
        "head_rows": args.head_rows,
        "all_rows_heads": sorted(all_rows),
        "zxx_per_kind": args.zxx_per_kind,
        "c_rows": None if args.C else args.c_rows,
        "balanced_heads": sorted(BALANCED),
        "precision_heads": sorted(PRECISE),
        "heads": chosen,
        "test": scores,
    }
    atomic_write_text(args.out / "SOURCES.json", json.dumps(sources, indent=1) + "\n")
    drop_locks(args.out)
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"saved {args.out} ({size / 1e6:.2f} MB) in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
