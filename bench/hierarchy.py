"""Hierarchical heads on Debian tags (`facet::value`), side by side on the same embeddings.

English Debian descriptions of ../shared/data with their tags, grouped 80/20 split (by
source package group). Every system sees the same trunk vectors (`--trunk`, default
`minilm`) and is scored by the same hierarchical precision / recall / F1 (each text's
true and answered tag sets taken with every ancestor, counted over all texts), per-level
F1, and the answers that hold a tag without its facet (`inconsistent`):

1. the `hierarchical` head (`fit_head(kind="hierarchical")`: one sigmoid output per
   node, thresholds per node tuned on a validation split, decided top-down);
2. a flat `multilabel` head on the tags as they are (a tag's facet is added to its
   answers before scoring, as the metric asks);
3. a flat `multilabel` head on every node (facets and tags as independent labels): its
   answers can hold a tag without its facet;
4. hiclass `LocalClassifierPerParentNode` with scikit-learn `LogisticRegression`
   (hiclass 5 takes one path per text: it is trained on one row per (text, tag) pair
   and answers one path per text).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SEP = "::"


def node_matrix(sets: list[list[str]], nodes: list[str]) -> np.ndarray:
    """0/1 rows over ``nodes`` of each text's labels and their ancestors."""
    from manyheads.heads.kinds import expand_paths

    index = {n: i for i, n in enumerate(nodes)}
    out = np.zeros((len(sets), len(nodes)), dtype=np.int64)
    for row, labels in enumerate(sets):
        for node in expand_paths(labels, SEP) if labels else []:
            if node in index:
                out[row, index[node]] = 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=6000, help="English Debian rows")
    ap.add_argument("--trunk", default="minilm")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()

    from _common import CACHE_DIR, debian_rows, grouped_split, machine, write_json
    from hiclass import LocalClassifierPerParentNode
    from sklearn.linear_model import LogisticRegression

    from manyheads import Bundle, EmbeddingCache
    from manyheads.evaluate.metrics import hierarchical_metrics
    from manyheads.heads.kinds import expand_paths, parent_index

    print(f"machine: {machine()}")
    rows, source = debian_rows(args.rows)
    rows = [r for r in rows if r["tags"]]
    train, test = grouped_split(rows)
    nodes = sorted({n for r in train for n in expand_paths(r["tags"], SEP)})
    parents = parent_index(nodes, SEP)
    truth = node_matrix([r["tags"] for r in test], nodes)
    print(
        f"data: {source}, {len(train)} train / {len(test)} test texts with tags, "
        f"{len(nodes)} nodes ({int((parents < 0).sum())} facets), "
        f"{np.mean([len(r['tags']) for r in rows]):.1f} tags a text; trunk {args.trunk}"
    )
    cache = EmbeddingCache(CACHE_DIR / "embeddings.sqlite")
    bundle = Bundle(trunk=args.trunk, cache=cache)
    texts = [r["text"] for r in train]
    test_texts = [r["text"] for r in test]
    groups = [r["group"] for r in train]
    started = time.perf_counter()
    X, X_test = bundle.embed(texts), bundle.embed(test_texts)
    print(f"embedded in {time.perf_counter() - started:.1f} s")
    X = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
    X_test = X_test.toarray() if hasattr(X_test, "toarray") else np.asarray(X_test)

    results: dict[str, Any] = {"machine": machine(), "rows": len(rows), "systems": {}}

    def score(name: str, picked: np.ndarray, seconds: float) -> None:
        m = hierarchical_metrics(truth, picked, parents)
        m["fit_seconds"] = seconds
        results["systems"][name] = m
        levels = " / ".join(f"{v:.3f}" for v in m["f1_per_level"].values())
        print(
            f"  {name:<44} hP {m['hierarchical_precision']:.3f}  hR "
            f"{m['hierarchical_recall']:.3f}  hF1 {m['hierarchical_f1']:.3f}  levels {levels}  "
            f"inconsistent {m['inconsistent']:>4}  fit {seconds:6.1f} s"
        )

    def answered(name: str) -> list[list[str]]:
        return [a[name]["labels"] for a in bundle.predict(test_texts, heads=[name])]

    print("\nsystem (same embeddings, same split)")
    for name, kind, labels in (
        ("hierarchical", "hierarchical", [r["tags"] for r in train]),
        ("flat_tags", "multilabel", [r["tags"] for r in train]),
        ("flat_nodes", "multilabel", [expand_paths(r["tags"], SEP) for r in train]),
    ):
        started = time.perf_counter()
        bundle.fit_head(name, texts, labels, kind=kind, groups=groups)
        seconds = time.perf_counter() - started
        picked = answered(name)
        if name == "flat_nodes":  # scored as answered: a tag may come without its facet
            index = {n: i for i, n in enumerate(nodes)}
            matrix = np.zeros_like(truth)
            for row, labs in enumerate(picked):
                matrix[row, [index[n] for n in labs if n in index]] = 1
        else:
            matrix = node_matrix(picked, nodes)
        title = {
            "hierarchical": "manyheads hierarchical head",
            "flat_tags": "manyheads multilabel head, tags",
            "flat_nodes": "manyheads multilabel head, every node",
        }[name]
        score(title, matrix, seconds)
        if name == "hierarchical":  # the other decision, on the same probabilities
            model = bundle.heads[name]
            proba = bundle.predict_proba(test_texts, heads=[name])[name]
            hits = proba >= model.thresholds_  # each node alone, then its ancestors added
            labels = model.classes_.tolist()
            bottom_up = [[labels[j] for j in np.flatnonzero(row)] for row in hits]
            score("  the same, bottom-up (ancestors added)", node_matrix(bottom_up, nodes), 0.0)

    # hiclass: one row per (text, tag) pair; one path per text answered
    pairs_X, pairs_y = [], []
    for i, r in enumerate(train):
        for tag in r["tags"]:
            pairs_X.append(i)
            pairs_y.append(tag.split(SEP, 1))
    started = time.perf_counter()
    hc = LocalClassifierPerParentNode(local_classifier=LogisticRegression(max_iter=1000), n_jobs=1)
    hc.fit(X[pairs_X], np.array(pairs_y, dtype=object))
    seconds = time.perf_counter() - started
    predicted = hc.predict(X_test)
    paths = [[SEP.join(str(p) for p in row if str(p))] for row in predicted]
    score("hiclass LocalClassifierPerParentNode + LR", node_matrix(paths, nodes), seconds)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
