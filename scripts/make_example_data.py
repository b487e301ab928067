"""Build the quick-start sample from the shared Debian descriptions corpus.

Writes ``examples/debian-en-train.jsonl.gz`` (5,000 rows) and
``examples/debian-en-test.jsonl.gz`` (1,000 rows): English package
descriptions, split by source-package family (``group``) so no family is on
both sides. Fields: text, section, role, interface, implemented_in, library
(binary: is the package in a library section), package, group.

    python scripts/make_example_data.py [--source ../shared/data/debdesc.jsonl.gz]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

LIBRARY_SECTIONS = {"libs", "libdevel", "oldlibs"}


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", default=str(root.parent / "shared/data/debdesc.jsonl.gz"))
    parser.add_argument("--train", type=int, default=5000)
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    by_group: dict[str, list[dict]] = {}
    with gzip.open(args.source, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if row["lang"] != "en" or not row.get("section"):
                continue
            by_group.setdefault(row["group"], []).append(row)
    groups = sorted(by_group)
    random.Random(args.seed).shuffle(groups)

    def take(n: int, pool: list[str]) -> tuple[list[dict], list[str]]:
        rows: list[dict] = []
        used = 0
        for g in pool:
            if len(rows) >= n:
                break
            rows.extend(by_group[g][: n - len(rows)])
            used += 1
        return rows, pool[used:]

    test_rows, rest = take(args.test, groups)
    train_rows, _ = take(args.train, rest)
    out = root / "examples"
    out.mkdir(exist_ok=True)
    for name, rows in (("train", train_rows), ("test", test_rows)):
        path = out / f"debian-en-{name}.jsonl.gz"
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as fh:
            for r in rows:
                record = {
                    "text": r["text"],
                    "section": r["section"],
                    "role": r.get("role") or [],
                    "interface": r.get("interface") or [],
                    "implemented_in": r.get("implemented_in") or [],
                    "library": "yes" if r["section"] in LIBRARY_SECTIONS else "no",
                    "package": r["package"],
                    "group": r["group"],
                }
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        print(f"wrote {path} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
