"""How long a head with hundreds of labels takes to train, and how much memory: one
hierarchical head over Debian tags (``facet::value``; ~480 nodes) on 2,000 English
descriptions with tags, default options, on ``--trunk fast`` and the default trunk
(``minilm+tfidf``; its texts encoded first, through the cache, and timed apart), each
in a fresh process; its hierarchical F1 on 500 descriptions of other packages::

    python bench/tags_speed.py [--trunks fast,minilm+tfidf] [--rows 2000] [--before ../wt]

``--before FOLDER`` (a checkout holding ``src/``) runs the same on an earlier tree
beside this one (the texts' vectors cached once, for both).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import debian_rows, grouped_split, in_tree, machine  # noqa: E402

WORK = r"""
import json, resource, sys, time
import manyheads
from manyheads.evaluate.metrics import hierarchical_metrics
trunk, rows_file, cache = sys.argv[1], sys.argv[2], sys.argv[3]
data = json.load(open(rows_file))
train, test = data["train"], data["test"]
texts = [r["text"] for r in train]
b = manyheads.Bundle(trunk=trunk, cache=cache)
t = time.perf_counter()
if b.trunk_needs_fit:
    b.fit_trunk(texts)  # a TF-IDF part's idf, as fit_head would
b.embed(texts + [r["text"] for r in test])  # the texts encoded (cached), timed apart
encode = time.perf_counter() - t
t = time.perf_counter()
s = b.fit_head("tags", texts, [r["tags"] for r in train], kind="hierarchical",
               groups=[r["group"] for r in train])
fit = time.perf_counter() - t
answers = b.predict([r["text"] for r in test], scores="none")
nodes = b.labels("tags")
index = {n: i for i, n in enumerate(nodes)}
import numpy as np
from manyheads.heads.labels import expand_paths
truth = np.zeros((len(test), len(nodes)), dtype=bool)
picked = np.zeros_like(truth)
for i, (r, a) in enumerate(zip(test, answers)):
    for n in expand_paths(r["tags"], "::"):
        if n in index:
            truth[i, index[n]] = True
    for n in a["tags"]["labels"]:
        picked[i, index[n]] = True
parents = b.fused_heads.specs["tags"].parents
m = hierarchical_metrics(truth, picked, parents)
print(json.dumps({"encode_s": encode, "fit_s": fit, "labels": len(nodes),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "hf1": m["hierarchical_f1"], "val_hf1": s.metrics.get("hierarchical_f1"),
                  "file": manyheads.__file__}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trunks", default="fast,minilm+tfidf")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--before", type=Path, default=None)
    args = parser.parse_args()
    rows, source = debian_rows(3 * args.rows)
    rows = [r for r in rows if r["tags"]]
    train, test = grouped_split(rows, 0.2)
    train, test = train[: args.rows], test[:500]
    print(f"{machine()}; {len(train)} train / {len(test)} test descriptions with tags ({source})")
    with tempfile.TemporaryDirectory() as tmp:
        rows_file = Path(tmp) / "rows.json"
        rows_file.write_text(json.dumps({"train": train, "test": test}))
        trees = {"after": HERE.parent, **({"before": args.before.resolve()} if args.before else {})}
        for trunk in args.trunks.split(","):
            for tree_name, tree in trees.items():
                cache = str(Path(tmp) / "cache.sqlite")
                found = in_tree(tree, WORK, trunk, str(rows_file), cache)
                print(
                    f"{tree_name:<7}{trunk:<14} {found['labels']} labels: "
                    f"fit {found['fit_s']:.1f} s "
                    f"(texts encoded before it: {found['encode_s']:.1f} s), peak "
                    f"{found['peak_mb']:.0f} MB, hF1 {found['hf1']:.4f} on held-out "
                    f"(validation {found['val_hf1']:.4f})"
                )


if __name__ == "__main__":
    main()
