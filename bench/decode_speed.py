"""How fast a bundle's answers are built and written as JSON lines once the heads'
probabilities are there: what bounds ``label`` when the trunk is fast (a GPU).

Ten heads on the hashing trunk (four of 55 classes, four binary, two multilabel),
fitted on the Debian examples; 20,000 rows; best of 3 for each of ``--scores`` none,
top and all. With ``--before FOLDER`` (a checkout holding ``src/``, e.g. a ``git
worktree``) the same work runs on both trees, each in a fresh process, taking turns::

    python bench/decode_speed.py --before ../wt-before
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import in_tree, machine  # noqa: E402

WORK = r"""
import gzip, json, sys, time
from pathlib import Path
import manyheads
rows = [json.loads(l) for l in gzip.open(Path(sys.argv[1]), "rt")]
texts = [r["text"] for r in rows]
b = manyheads.Bundle("hashing", cache=None)
keep = [i for i, r in enumerate(rows) if r["role"]]
for k in range(4):
    b.fit_head(f"section{k}", texts, [r["section"] for r in rows], C=1.0)
    b.fit_head(f"library{k}", texts, [r["library"] for r in rows], kind="binary", C=1.0)
for k in range(2):
    b.fit_head(f"role{k}", [texts[i] for i in keep], [rows[i]["role"] for i in keep],
               kind="multilabel", C=1.0)
fused, names = b.fused_heads, list(b.heads)
probs = fused.probabilities(b.embed(texts * 4, use_cache=False), names)
found = {}
for scores in ("none", "top", "all"):
    built = written = float("inf")
    for _ in range(3):
        t = time.perf_counter(); ans = fused.answers(probs, names, scores)
        built = min(built, time.perf_counter() - t)
        t = time.perf_counter(); "\n".join(json.dumps(a) for a in ans)
        written = min(written, time.perf_counter() - t)
    n = len(ans)
    found[scores] = {"built": n / built, "json": n / written, "both": n / (built + written)}
print(json.dumps({"found": found, "file": manyheads.__file__}))
"""


def run(tree: Path) -> dict:
    examples = HERE.parent / "examples" / "debian-en-train.jsonl.gz"
    return in_tree(tree, WORK, str(examples))["found"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    trees = {"after": HERE.parent, **({"before": args.before.resolve()} if args.before else {})}
    best: dict[str, dict[str, dict[str, float]]] = {}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            for scores, rates in run(tree).items():
                kept = best.setdefault(name, {}).setdefault(scores, rates)
                if rates["both"] > kept["both"]:
                    best[name][scores] = rates
    print(f"{machine()}; 10 heads, 20,000 rows; rows/s, best of {args.rounds} rounds x 3")
    print(f"{'scores':<8}" + "".join(f"{t + ' built':>14}{t + ' +json':>14}" for t in trees))
    for scores in ("none", "top", "all"):
        cells = "".join(
            f"{best[t][scores]['built']:>14,.0f}{best[t][scores]['both']:>14,.0f}" for t in trees
        )
        print(f"{scores:<8}{cells}")
    if "before" in trees:
        for scores in ("none", "top", "all"):
            ratio = best["after"][scores]["both"] / best["before"][scores]["both"]
            print(f"after / before, built and written, scores={scores}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
