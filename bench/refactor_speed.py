"""The same work on two source trees, side by side: this checkout and an earlier one
(``--before``, a folder holding a checkout's ``src/``, e.g. a ``git worktree`` of the
last release), to show that a restructuring changed no speed.

Each measurement runs in a fresh process per tree, the trees taking turns inside each
of ``--rounds`` rounds (the machine's speed drifts over minutes); the best round of
each is reported, with the ratio after / before:

- ``content``: the built-in byte-trunk bundle answering 2,000 texts (every head);
- ``content-fast``: the built-in n-gram bundle on the same texts;
- ``hashing+ngram``: a bundle of 4 heads (multiclass, binary, multilabel,
  hierarchical) on a composite trunk, saved by the earlier tree, answering them;
- ``fit``: fitting one multiclass head on 2,000 Debian descriptions (hashing trunk);
- ``minilm``: a bundle of 2 heads on MiniLM, saved by the earlier tree, answering the
  first ``--minilm-texts`` texts on the CPU (the transformer's encoding path).

    python bench/refactor_speed.py --before ../wt-before
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import debian_rows, in_tree, machine  # noqa: E402

WORK = r"""
import json, sys, time
import manyheads
task, folder, texts_file = sys.argv[1], sys.argv[2], sys.argv[3]
rows = json.load(open(texts_file))[: int(sys.argv[4]) if len(sys.argv) > 4 else None]
texts = [r["text"] for r in rows]
best = float("inf")
if task == "fit":
    labels = [r["section"] for r in rows]
    for _ in range(2):
        b = manyheads.Bundle(trunk="hashing", cache=None)
        t = time.perf_counter()
        b.fit_head("section", texts, labels, seed=0)
        best = min(best, time.perf_counter() - t)
elif task == "save":
    b = manyheads.Bundle(trunk="hashing@1+ngram@0.5", cache=None)
    top = sorted({r["section"] for r in rows}, key=lambda s: -sum(r["section"] == s for r in rows))
    section = [r["section"] if r["section"] in top[:8] else "other" for r in rows]
    b.fit_head("section", texts, section, seed=0)
    b.fit_head("library", texts, [r["library"] for r in rows], "binary", seed=0)
    b.fit_head("role", texts, [r["role"] for r in rows], "multilabel", seed=0)
    b.fit_head("place", texts, [[f"{s}::{r['library']}"] for s, r in zip(section, rows)],
               "hierarchical", seed=0)
    b.save(folder)
    best = 0.0
elif task == "save-minilm":
    b = manyheads.Bundle(trunk="minilm", cache=None)
    b.fit_head("library", texts, [r["library"] for r in rows], "binary", seed=0)
    b.fit_head("role", texts, [r["role"] for r in rows], "multilabel", seed=0)
    b.save(folder)
    best = 0.0
else:
    b = manyheads.Bundle.load(folder, cache=None)
    b.predict(texts[:64])
    for _ in range(3):
        t = time.perf_counter()
        b.predict(texts)
        best = min(best, time.perf_counter() - t)
print(json.dumps({"seconds": best, "file": manyheads.__file__}))
"""


def run(tree: Path, task: str, folder: str, texts_file: str, limit: int = 0) -> float:
    found = in_tree(tree, WORK, task, folder, texts_file, *([str(limit)] if limit else []))
    return float(found["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--minilm-texts", type=int, default=300)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": HERE.parent}
    rows, source = debian_rows(args.texts)
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = str(Path(tmp) / "rows.json")
        Path(texts_file).write_text(json.dumps(rows))
        saved = str(Path(tmp) / "composite")
        run(trees["before"], "save", saved, texts_file)  # saved by the earlier tree
        minilm = str(Path(tmp) / "minilm")
        run(trees["before"], "save-minilm", minilm, texts_file, args.minilm_texts)
        tasks = {"content": "content", "content-fast": "content-fast", "hashing+ngram": saved}
        tasks["fit"] = ""
        tasks["minilm"] = minilm
        limits = {"minilm": args.minilm_texts}
        best: dict[tuple[str, str], float] = {}
        for _ in range(args.rounds):
            for task, folder in tasks.items():
                for name, tree in trees.items():
                    kind = "fit" if task == "fit" else "predict"
                    seconds = run(tree, kind, folder, texts_file, limits.get(task, 0))
                    key = (task, name)
                    best[key] = min(best.get(key, float("inf")), seconds)
    print(f"{machine()}; {len(rows)} texts of {source}; best of {args.rounds} rounds")
    print(f"{'work':<16}{'before s':>10}{'after s':>10}{'after/before':>14}")
    for task in tasks:
        b, a = best[(task, "before")], best[(task, "after")]
        print(f"{task:<16}{b:>10.3f}{a:>10.3f}{a / b:>14.3f}")


if __name__ == "__main__":
    main()
