"""Extreme label spaces: the tree head against a dense linear head and against
napkinXC's and Omikuji's probabilistic label trees, on the same trunk vectors::

    python bench/extreme.py [--labels 10000] [--parts trees,forest,dense,...]

1. A real task: which English source string a translated UI string (gettext) is a
   translation of. Labels: ``--labels`` sources (drawn at random, seeded, from those
   with at least three translations and at most 200 characters). Split by locale
   (the group): a fifth of the locales are held out; a test row whose source no
   training row has is dropped. Trunk: ``static`` (256-d; the vectors are the same
   for every system). P@1 / P@5 of the tree head, a dense ``LinearHead`` (fitted
   with the solver every linear head uses, at C=10, its better C on this data),
   napkinXC's PLT and Omikuji (each at its defaults), training seconds, texts/s.
   The tree is also grown from the labels' names (the trunk's vectors of the English
   sources) instead of their rows' mean; ``forest``: heads of 2 and 3 trees.
2. Training at scale: 100,000 synthetic labels on 200,000 cached 256-d vectors
   (labels in 1,000 topics; rows = label centre + noise): seconds, peak memory.
3. Predict cost: a text through a bundle (static trunk) with 9 dense heads alone, and
   with the 100,000-label tree head as a 10th, of one tree and of two (the default
   there); then with a 10^6-label tree (random
   weights: memory and speed only), its bytes against a dense float32 matrix.

Results go to ``bench/results/extreme.json``.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import resource
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from _common import cpu_model, machine  # noqa: E402

GETTEXT = HERE.parent.parent / "shared" / "data" / "gettext.jsonl.gz"
PARTS = ("trees", "forest", "dense", "napkinxc", "omikuji", "training", "predict")


def gettext_rows() -> list[dict]:
    with gzip.open(GETTEXT, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def p_at(ranked: list[list[int]], truth: np.ndarray) -> dict[str, float]:
    """P@1 and P@5 of single-label rows (P@5: the share of the five that is right)."""
    p1 = float(np.mean([len(r) > 0 and r[0] == truth[i] for i, r in enumerate(ranked)]))
    p5 = float(np.mean([truth[i] in r[:5] for i, r in enumerate(ranked)]) / 5)
    return {"P@1": round(p1, 4), "P@5": round(p5, 4)}


def ranked_of(proba) -> list[list[int]]:  # type: ignore[no-untyped-def]
    P = proba.tocsr()
    out = []
    for i in range(P.shape[0]):
        lo, hi = P.indptr[i], P.indptr[i + 1]
        cols, ps = P.indices[lo:hi], P.data[lo:hi]
        out.append(cols[np.lexsort((cols, -ps))][:5].tolist())
    return out


def real_task(n_labels: int, parts: set[str], work: Path) -> dict:
    from manyheads.heads.solver import fit_softmax
    from manyheads.heads.tree_fit import TreeHead
    from manyheads.trunks import load_trunk

    rows = gettext_rows()
    counts = Counter(r["source_en"] for r in rows)
    pool = sorted(s for s, c in counts.items() if c >= 3 and len(s) <= 200)
    rng = np.random.default_rng(0)
    chosen = set(rng.choice(pool, min(n_labels, len(pool)), replace=False).tolist())
    rows = [r for r in rows if r["source_en"] in chosen]
    locales = sorted({r["locale"] for r in rows})
    held = set(rng.choice(locales, len(locales) // 5, replace=False).tolist())
    train = [r for r in rows if r["locale"] not in held]
    known = {r["source_en"] for r in train}
    test = [r for r in rows if r["locale"] in held and r["source_en"] in known]
    test = [test[i] for i in rng.permutation(len(test))[:10_000]]
    classes = sorted(known)
    index = {c: i for i, c in enumerate(classes)}
    y = np.array([index[r["source_en"]] for r in train])
    yt = np.array([index[r["source_en"]] for r in test])
    trunk = load_trunk("static")
    X = trunk.encode([r["text"] for r in train])
    Xt = trunk.encode([r["text"] for r in test])
    names = trunk.encode(classes)
    out: dict = {
        "labels": len(classes),
        "train_rows": len(train),
        "test_rows": len(test),
        "trunk": "static (256-d)",
        "split": f"{len(held)} of {len(locales)} locales held out",
    }
    systems: dict = {}

    # as fit_head does: a tenth of the training locales validates (the path's weight),
    # then the head is fitted again on every training row
    val_locales = set(rng.choice(sorted({r["locale"] for r in train}), 12, replace=False))
    val = np.array([r["locale"] in val_locales for r in train])
    labels = [classes[i] for i in y]

    def tree_run(label: str, **fit_kw) -> None:  # type: ignore[no-untyped-def]
        vectors = fit_kw.pop("label_vectors", None)
        t = time.perf_counter()
        head = TreeHead(**fit_kw)
        first = sorted({labels[i] for i in np.flatnonzero(~val)})
        head.fit(
            X[~val],
            [labels[i] for i in np.flatnonzero(~val)],
            X[val],
            [labels[i] for i in np.flatnonzero(val)],
            label_vectors=None if vectors is None else vectors[[index[c] for c in first]],
        )
        route = head.route_
        head.fit(X, labels, label_vectors=vectors)
        head.route_ = route
        fit_s = time.perf_counter() - t
        t = time.perf_counter()
        proba = head.predict_proba(Xt)
        pred_s = time.perf_counter() - t
        ranked = [[index[head.classes_[j]] for j in r] for r in ranked_of(proba)]
        systems[label] = {
            **p_at(ranked, yt),
            "train_s": round(fit_s, 1),
            "texts_per_s": round(len(test) / pred_s),
            "bytes": head.nbytes(),
            "route": route,
        }
        print(label, systems[label], flush=True)

    if "trees" in parts or "trees-int4" in parts:
        tree_run("tree (rows' mean), int4", precision="int4", trees=1)
    if "trees" in parts:
        tree_run("tree (rows' mean)", trees=1)
        tree_run("tree (rows' mean), int8", precision="int8", trees=1)
        tree_run("tree (label names)", label_vectors=names, trees=1)
        tree_run("tree, leaves of 100 labels, 32 branches", leaf_size=100, branching=32, trees=1)
    if "forest" in parts:
        if "trees" not in parts:  # the one-tree head beside them, in the same run
            tree_run("tree (rows' mean)", trees=1)
        tree_run("tree (rows' mean), 2 trees", trees=2)  # the default ("auto") here
        tree_run("tree (rows' mean), 3 trees", trees=3)
    if "dense" in parts:
        t = time.perf_counter()
        sol = fit_softmax(X, y, len(classes), C=10.0, max_iter=300)
        fit_s = time.perf_counter() - t
        t = time.perf_counter()
        Z = Xt @ sol.coef.T + sol.intercept
        ranked = np.argsort(-Z, axis=1)[:, :5].tolist()
        pred_s = time.perf_counter() - t
        systems["dense linear (C=10)"] = {
            **p_at(ranked, yt),
            "train_s": round(fit_s, 1),
            "texts_per_s": round(len(test) / pred_s),
            "bytes": int(sol.coef.nbytes + sol.intercept.nbytes),
        }
        print(systems["dense linear (C=10)"], flush=True)
    if "napkinxc" in parts:
        systems |= _napkinxc(X, y, Xt, yt)
    if "omikuji" in parts:
        systems |= _omikuji(X, y, Xt, yt, work)
    out["systems"] = systems
    return out


def _napkinxc(X, y, Xt, yt) -> dict:  # type: ignore[no-untyped-def]
    try:
        from napkinxc.models import PLT
    except ImportError:
        return {"napkinXC PLT": "not installed (pip install 'manyheads[bench]')"}
    with tempfile.TemporaryDirectory() as tmp:
        model = PLT(tmp, threads=2, seed=0)
        t = time.perf_counter()
        model.fit(X, [[int(v)] for v in y])
        fit_s = time.perf_counter() - t
        t = time.perf_counter()
        ranked = model.predict(Xt, top_k=5)
        pred_s = time.perf_counter() - t
    out = {**p_at([list(r) for r in ranked], yt), "train_s": round(fit_s, 1)}
    out["texts_per_s"] = round(len(yt) / pred_s)
    print("napkinXC", out, flush=True)
    return {"napkinXC PLT": out}


def _libsvm(path: Path, X: np.ndarray, y: np.ndarray | None) -> None:
    with open(path, "w") as fh:
        fh.write(f"{len(X)} {X.shape[1]} {int(y.max()) + 1 if y is not None else 0}\n")
        for i, row in enumerate(X):
            feats = " ".join(f"{j}:{v:.6f}" for j, v in enumerate(np.nan_to_num(row)))
            fh.write(f"{int(y[i]) if y is not None else 0} {feats}\n")


def _omikuji(X, y, Xt, yt, work: Path) -> dict:  # type: ignore[no-untyped-def]
    try:
        import omikuji
    except ImportError:
        return {"Omikuji": "not installed (pip install 'manyheads[bench]')"}
    path = work / "omikuji-train.txt"
    _libsvm(path, X, y)
    t = time.perf_counter()
    model = omikuji.Model.train_on_data(str(path), omikuji.Model.default_hyper_param(), 2)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    ranked = []
    for row in np.nan_to_num(Xt):
        feats = [(j, float(v)) for j, v in enumerate(row)]
        ranked.append([int(label) for label, _ in model.predict(feats, top_k=5)])
    pred_s = time.perf_counter() - t
    out = {**p_at(ranked, yt), "train_s": round(fit_s, 1), "texts_per_s": round(len(yt) / pred_s)}
    print("Omikuji", out, flush=True)
    return {"Omikuji": out}


def synthetic(n_labels: int, n_rows: int, dim: int, seed: int = 0):  # type: ignore[no-untyped-def]
    """Labels in topics: a topic centre, each label near it, each row near its label."""
    rng = np.random.default_rng(seed)
    topics = rng.standard_normal((n_labels // 100, dim)).astype(np.float32)
    centres = topics[np.arange(n_labels) // 100] + 0.7 * rng.standard_normal(
        (n_labels, dim)
    ).astype(np.float32)
    y = np.concatenate([np.arange(n_labels), rng.integers(0, n_labels, n_rows - n_labels)])
    X = centres[y] + 0.5 * rng.standard_normal((n_rows, dim)).astype(np.float32)
    return X, y


def training_at_scale(dim: int = 256, trees: int = 1) -> tuple[dict, object]:
    from manyheads.heads.tree_fit import TreeHead

    X, y = synthetic(100_000, 200_000, dim)
    tracemalloc.start()
    t = time.perf_counter()
    head = TreeHead(trees=trees).fit(X, [f"label-{v}" for v in y])
    seconds = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    Xt, yt = synthetic(100_000, 101_000, dim, seed=0)
    Xt, yt = Xt[100_000:], yt[100_000:]
    ranked = ranked_of(head.predict_proba(Xt))
    named = {c: i for i, c in enumerate(head.classes_.tolist())}
    truth = np.array([named[f"label-{v}"] for v in yt])
    out = {
        "labels": 100_000,
        "rows": 200_000,
        "trees": trees,
        "dim": dim,
        "train_s": round(seconds, 1),
        "peak_traced_MiB": round(peak / 2**20),
        "max_rss_MiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "inner_nodes": head.trees_[0].n_inner,
        **p_at(ranked, truth),
    }
    print("training", out, flush=True)
    return out, head


def predict_cost(tree_head, trunk: str = "static", forest=None) -> dict:  # type: ignore[no-untyped-def]
    from manyheads import Bundle
    from manyheads.heads.tree import LabelTree
    from manyheads.heads.tree_fit import TreeHead, quantised

    rows = gettext_rows()
    rng = np.random.default_rng(1)
    sample = [rows[i] for i in rng.permutation(len(rows))[:6000]]
    texts = [r["text"] for r in sample[:4000]]
    probe = [r["text"] for r in sample[4000:]]
    b = Bundle(trunk=trunk)
    fields = ["lang", "domain", "locale"]
    for i in range(9):
        field = fields[i % 3]
        b.fit_head(f"dense{i}", texts, [r[field] for r in sample[:4000]], keep_data=False)
    dense = [f"dense{i}" for i in range(9)]

    def side_by_side(heads: list[str], rounds: int = 5) -> tuple[float, float]:
        """Seconds a text with the 9 dense heads and with ``heads``, the best of
        ``rounds`` passes each, taken in turn (a busy moment hits both alike)."""
        for names in (dense, heads):
            b.predict(probe[:200], heads=names, scores="top")  # warm
        # a full collection set off inside a timed call would walk the labels of every
        # head: what is built by now is frozen out of the collector (as content_fast)
        gc.collect()
        gc.freeze()
        best = {0: float("inf"), 1: float("inf")}
        for _ in range(rounds):
            for i, names in enumerate((dense, heads)):
                t = time.perf_counter()
                b.predict(probe, heads=names, scores="top")
                best[i] = min(best[i], time.perf_counter() - t)
        return best[0] / len(probe), best[1] / len(probe)

    out: dict = {"texts": len(probe), "trunk": trunk}
    b.add_head("extreme", tree_head)
    base, cost = side_by_side([*dense, "extreme"])
    out["9 dense heads, ms/text"] = round(base * 1e3, 4)
    out["+ tree head of 10^5 labels, ms/text"] = round(cost * 1e3, 4)
    out["ratio at 10^5"] = round(cost / base, 2)
    if forest is not None:
        b.add_head("forest", forest)
        base, cost = side_by_side([*dense, "forest"])
        out["2 trees of 10^5 labels: 9 dense heads, ms/text"] = round(base * 1e3, 4)
        out["+ 2 trees of 10^5 labels, ms/text"] = round(cost * 1e3, 4)
        out["ratio at 10^5, 2 trees"] = round(cost / base, 2)
        b.remove_head("forest")
    print("predict", out, flush=True)
    # 10^6 labels: a balanced tree (32 children per inner node, 100 labels per leaf
    # node), random weights in float16, int8 and int4
    n_labels, dim = 1_000_000, int(b.trunk.dim)
    rng = np.random.default_rng(2)
    leaves = n_labels // 100
    mids = -(-leaves // 32)
    children = [np.arange(1, 1 + mids)]
    children += [1 + mids + np.arange(m * 32, min(leaves, (m + 1) * 32)) for m in range(mids)]
    n_inner = 1 + mids + leaves
    children += [n_inner + np.arange(k * 100, (k + 1) * 100) for k in range(leaves)]
    start = np.zeros(n_inner + 1, dtype=np.int64)
    start[1:] = np.cumsum([len(c) for c in children])
    flat = np.concatenate(children).astype(np.int64)
    for precision in ("float16", "int8", "int4"):
        weights = rng.standard_normal((len(flat), dim)).astype(np.float32) * 0.05
        tree = quantised(start, flat, weights, np.zeros(len(flat), np.float32), True, precision)
        del weights
        LabelTree.check(tree.tensors(), n_labels, True)
        head = TreeHead(precision=precision)
        head.classes_ = np.asarray([f"l{i}" for i in range(n_labels)])
        head.trees_, head.temperature_, head.threshold_, head.route_ = (tree,), 1.0, 0.5, 1.0
        head.n_features_in_ = dim
        name = f"extreme6-{precision}"
        b.add_head(name, head)
        base, cost = side_by_side([*dense, name])
        # the peak in a call of its own: tracing every allocation slows the search
        # down several times, so the timed calls run untraced
        tracemalloc.start()
        b.predict(probe, heads=[*dense, name], scores="top")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        dense_bytes = n_labels * (dim + 1) * 4
        out[f"10^6 {precision}"] = {
            "ms/text": round(cost * 1e3, 4),
            "9 dense heads, ms/text": round(base * 1e3, 4),
            "ratio": round(cost / base, 2),
            "head_MiB": round(tree.nbytes() / 2**20),
            "head / dense float32": round(tree.nbytes() / dense_bytes, 3),
            "search peak MiB (traced, 2,000 texts)": round(peak / 2**20),
        }
        print(precision, out[f"10^6 {precision}"], flush=True)
        b.remove_head(name)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--labels", type=int, default=10_000)
    ap.add_argument(
        "--trunk", default="static", help="the trunk of the predict-cost bundle (static, minilm)"
    )
    ap.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"which to run, of {','.join(PARTS)} (the others' figures are kept from the "
        "last run's JSON); trees-int4: the int4 tree alone",
    )
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    out = HERE / "results" / "extreme.json"
    result: dict = json.loads(out.read_text()) if out.exists() else {}
    result |= {"machine": machine(), "cpu": cpu_model()}
    if parts & {"trees", "trees-int4", "forest", "dense", "napkinxc", "omikuji"}:
        with tempfile.TemporaryDirectory() as tmp:
            real = real_task(args.labels, parts, Path(tmp))
        kept = result.get("real", {}).get("systems", {})
        result["real"] = real | {"systems": kept | real["systems"]}
        out.write_text(json.dumps(result, indent=1) + "\n")
    if parts & {"training", "predict"}:
        from manyheads.trunks import load_trunk

        suffix = "" if args.trunk == "static" else f" ({args.trunk})"
        dim = int(load_trunk(args.trunk).dim)
        result["training" + suffix], head = training_at_scale(dim)
        out.write_text(json.dumps(result, indent=1) + "\n")
        if "predict" in parts:  # two trees: the default ("auto") at 10^5 labels
            result["training, 2 trees" + suffix], forest = training_at_scale(dim, trees=2)
            result["predict" + suffix] = predict_cost(head, args.trunk, forest)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
