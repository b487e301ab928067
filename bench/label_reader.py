"""The labelling job of another checkout (``--old SRC``: its ``src/`` folder, e.g. a
``git worktree`` of an earlier commit) and of this one, alternately, on the same
100,000 real rows (Debian descriptions of ../shared/data, JSONL), the built-in
``content`` bundle, each run a fresh process: rows/s of each, the ratio of the bests,
and whether both wrote the same bytes. Measures what reading through the one table
reader (bytes lines decoded one at a time, each part's input hashed as it is read)
costs the job.

    git worktree add /tmp/old-src <commit>
    .venv/bin/python bench/label_reader.py --old /tmp/old-src/src
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--old", required=True, help="the src/ folder of the other checkout")
ap.add_argument("--rows", type=int, default=100_000)
ap.add_argument("--rounds", type=int, default=2)
args = ap.parse_args()
shared = HERE.parent.parent / "shared" / "data" / "debdesc.jsonl.gz"
with gzip.open(shared, "rt", encoding="utf-8") as fh:
    rows = [json.loads(line) for _, line in zip(range(args.rows), fh, strict=False)]
work = Path(tempfile.mkdtemp())
src = work / "in.jsonl"
with open(src, "w") as f:
    for i, r in enumerate(rows):
        f.write(json.dumps({"id": i, "text": r["text"]}, ensure_ascii=False) + "\n")
CHILD = """
import sys, time
from manyheads.label import label_file
t = time.perf_counter()
s = label_file(sys.argv[1], "content", sys.argv[2])
print(s.rows, time.perf_counter() - t)
"""
res = {"old": [], "new": []}
for rnd in range(args.rounds):
    for name, path in (("old", args.old), ("new", str(HERE.parent / "src"))):
        out = work / f"{name}{rnd}.jsonl"
        env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}
        p = subprocess.run(
            [sys.executable, "-c", CHILD, str(src), str(out)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        n, secs = p.stdout.split()
        res[name].append(int(n) / float(secs))
        print(name, rnd, f"{int(n) / float(secs):,.0f} rows/s", flush=True)
same = (work / "old0.jsonl").read_bytes() == (work / "new0.jsonl").read_bytes()
print("same bytes:", same)
best_old, best_new = max(res["old"]), max(res["new"])
print(f"best old {best_old:,.0f}  best new {best_new:,.0f}  new/old {best_new / best_old:.3f}")
