"""How kinds_bundle was made (by the code before head kinds were objects): a small
hashing-trunk bundle with a linear and an MLP head of each kind, and the answers it
gave (``answers.json``). tests/test_kinds.py loads it and asks for the same answers.

    python tests/snapshots/kinds_bundle/make.py OUT_FOLDER
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from manyheads import Bundle, HashingTrunk
from manyheads.heads.mlp import MLPHead, MLPTraining

PROBE = ["whiskers purr", "hammer wrench the leaves", "bark fetch a hammer", "", "unrelated words"]


def main(out: Path) -> None:
    rng = random.Random(0)
    words = {
        "cat": "whiskers purr",
        "dog": "bark fetch",
        "tree": "leaves trunk",
        "tool": "hammer wrench",
    }
    texts: list[str] = []
    labels: dict[str, list] = {"multiclass": [], "binary": [], "multilabel": [], "hierarchical": []}
    for i in range(80):
        a, b = rng.sample(sorted(words), 2)
        texts.append(
            f"{words[a]} {rng.choice(['the', 'a', 'of'])} {words[b] if i % 3 else ''}".strip()
        )
        labels["multiclass"].append(a)
        labels["binary"].append("yes" if a in ("cat", "dog") else "no")
        labels["multilabel"].append(sorted({a, b}) if i % 3 else [a])
        labels["hierarchical"].append(["animal::" + a] if a in ("cat", "dog") else ["thing::" + a])
    bundle = Bundle(trunk=HashingTrunk(dim=32), cache=None)
    X = bundle.embed(texts)
    for kind, y in labels.items():
        bundle.fit_head(f"{kind}_linear", texts, y, kind=kind, keep_data=False)
        head = MLPHead(
            kind=kind, hidden=4, training=MLPTraining(max_epochs=30), random_state=0
        ).fit(X, y)
        bundle.add_head(f"{kind}_mlp", head, info={"trunk_fingerprint": bundle.trunk_fingerprint})
    bundle.save(out)
    answers = {s: bundle.predict(PROBE, scores=s) for s in ("all", "top", "none")}
    (out / "answers.json").write_text(
        json.dumps({"texts": PROBE, "answers": answers}, indent=1, sort_keys=True) + "\n"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
