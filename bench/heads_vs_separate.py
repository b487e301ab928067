"""One bundle with 1, 5 and 10 heads vs 10 separate per-task pipelines, in one run.

Separate pipelines are what people run today: for each classifier, its own
SentenceTransformer (all-MiniLM-L6-v2) and its own scikit-learn
LogisticRegression (one-vs-rest for multilabel tasks). A manyheads bundle runs
the same encoder once and applies every head with one matrix product.

Also measured: training one head on 10,000 cached 384-d embeddings, and the
trunk calls made when every head of the bundle is retrained with a warm cache.

    .venv/bin/python bench/heads_vs_separate.py [--train 10000] [--predict 300] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from _common import CACHE_DIR, best_of, debian_rows, machine, write_json
from sklearn.linear_model import LogisticRegression
from sklearn.multiclass import OneVsRestClassifier
from sklearn.preprocessing import MultiLabelBinarizer

from manyheads import Bundle, EmbeddingCache, LinearHead, load_trunk
from manyheads.trunks import minilm_path

TASKS = [  # (head, kind): ten classifiers over the same texts
    ("section", "multiclass"),
    ("library", "binary"),
    ("role", "multilabel"),
    ("interface", "multilabel"),
    ("use", "multilabel"),
    ("implemented_in", "multilabel"),
    ("devel", "multilabel"),
    ("works_with", "multilabel"),
    ("uitoolkit", "multilabel"),
    ("tags", "multilabel"),
]


class CountingTrunk:
    """Counts calls to the wrapped trunk's ``encode``."""

    def __init__(self, inner):  # type: ignore[no-untyped-def]
        self.inner, self.name, self.calls = inner, inner.name, 0
        self.dim, self.fingerprint = inner.dim, inner.fingerprint

    def spec(self):  # type: ignore[no-untyped-def]
        return self.inner.spec()

    def encode(self, texts, **kw):  # type: ignore[no-untyped-def]
        self.calls += 1
        return self.inner.encode(texts, **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--train", type=int, default=10000, help="training texts (cached embeddings)")
    ap.add_argument(
        "--pipeline-train",
        type=int,
        default=2000,
        help="training texts for each separate pipeline's LogisticRegression",
    )
    ap.add_argument("--predict", type=int, default=300, help="texts to predict")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()

    rows, source = debian_rows(args.train + args.predict)
    train, unseen = rows[: args.train], rows[args.train :]
    texts = [r["text"] for r in unseen]
    train_texts = [r["text"] for r in train]
    print(
        f"data: {source}; {len(train)} training texts, {len(texts)} texts to predict "
        f"(median {int(np.median([len(t) for t in texts]))} characters)"
    )
    print(f"machine: {machine()}")

    trunk = CountingTrunk(load_trunk("minilm"))
    bundle = Bundle(trunk=trunk, cache=EmbeddingCache(CACHE_DIR / "embeddings.sqlite"))
    X = bundle.embed(train_texts, progress=True)  # fills the cache (reused across runs)

    # -- training ---------------------------------------------------------
    fit_seconds = {}
    for name, kind in TASKS:
        s = bundle.fit_head(
            name,
            train_texts,
            [r[name] for r in train],
            kind=kind,
            groups=[r["group"] for r in train],
        )
        fit_seconds[name] = s.seconds
    calls = trunk.calls
    t = time.perf_counter()
    for name, kind in TASKS:
        bundle.fit_head(
            name,
            train_texts,
            [r[name] for r in train],
            kind=kind,
            groups=[r["group"] for r in train],
        )
    retrain_all = time.perf_counter() - t
    retrain_calls = trunk.calls - calls
    y = [r["section"] for r in train]
    head_fit = best_of(
        lambda: LinearHead().fit(X[:8000], y[:8000], X_val=X[8000:], y_val=y[8000:]), args.repeat
    )
    fit_head_section = best_of(
        lambda: bundle.fit_head("section", train_texts, y, groups=[r["group"] for r in train]),
        args.repeat,
    )

    # -- separate pipelines, as people run them ---------------------------
    from sentence_transformers import SentenceTransformer

    n_fit = min(args.pipeline_train, len(train))
    pipelines = []
    for name, kind in TASKS:
        model = SentenceTransformer(str(minilm_path()), device="cpu")
        labels = [r[name] for r in train[:n_fit]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if kind == "multilabel":
                Y = MultiLabelBinarizer().fit_transform(labels)
                clf = OneVsRestClassifier(LogisticRegression(max_iter=1000)).fit(X[:n_fit], Y)
            else:
                clf = LogisticRegression(max_iter=1000).fit(X[:n_fit], labels)
        pipelines.append((model, clf))

    def run_separate() -> None:
        for model, clf in pipelines:
            clf.predict_proba(model.encode(texts))

    names = [n for n, _ in TASKS]
    warm = texts[:16]
    bundle.predict(warm)
    for model, _ in pipelines:
        model.encode(warm)

    # interleaved (1, 5, 10, 1, 5, 10, ...) so drift in machine speed hits all alike
    timings = {f"bundle_{k}": float("inf") for k in (1, 5, 10)}
    for _ in range(args.repeat):
        for k in (1, 5, 10):
            t = time.perf_counter()
            bundle.predict(texts, heads=names[:k])
            timings[f"bundle_{k}"] = min(timings[f"bundle_{k}"], time.perf_counter() - t)
    timings["separate_10"] = best_of(run_separate, 2)
    E = bundle.embed(texts, use_cache=False)
    fused = bundle.fused_heads
    assert fused is not None
    heads_only = {
        k: best_of(lambda k=k: fused.predict(E, names[:k]), args.repeat) for k in (1, 5, 10)
    }

    n = len(texts)
    res = {
        "source": source,
        "n_predict": n,
        "texts_per_s": {k: n / v for k, v in timings.items()},
        "ms_per_text": {k: 1000 * v / n for k, v in timings.items()},
        "heads_only_ms_per_text": {k: 1000 * v / n for k, v in heads_only.items()},
        "ratio_10_heads_vs_1": timings["bundle_10"] / timings["bundle_1"],
        "speedup_vs_separate": timings["separate_10"] / timings["bundle_10"],
        "fit_seconds": fit_seconds,
        "linear_head_fit_10k_s": head_fit,
        "fit_head_section_10k_s": fit_head_section,
        "retrain_all_seconds": retrain_all,
        "retrain_all_trunk_calls": retrain_calls,
    }
    print(f"\n{'pipeline':<34}{'texts/s':>10}{'ms/text':>10}")
    for key, label in (
        ("bundle_1", "bundle, 1 head"),
        ("bundle_5", "bundle, 5 heads"),
        ("bundle_10", "bundle, 10 heads"),
        ("separate_10", "10 separate ST + LR pipelines"),
    ):
        print(f"{label:<34}{res['texts_per_s'][key]:>10.1f}{res['ms_per_text'][key]:>10.2f}")
    print(f"\n10 heads / 1 head time per text: {res['ratio_10_heads_vs_1']:.3f}x")
    print(f"bundle (10 heads) vs 10 separate pipelines: {res['speedup_vs_separate']:.2f}x faster")
    print(
        "heads only (fused matrix + decoding), ms per text: "
        + ", ".join(f"{k} heads {v:.3f}" for k, v in res["heads_only_ms_per_text"].items())
    )
    print(
        f"\nLinearHead.fit, section ({len(set(y))} classes), 8,000 train + 2,000 validation "
        f"cached 384-d embeddings: {head_fit:.2f} s"
    )
    print(
        f"Bundle.fit_head('section') on 10,000 cached texts (cache read, grouped split, fit, "
        f"temperature, refit on all): {fit_head_section:.2f} s"
    )
    print(
        "first training per head (s): " + ", ".join(f"{k} {v:.2f}" for k, v in fit_seconds.items())
    )
    print(
        f"retraining all {len(TASKS)} heads with a warm cache: {retrain_all:.1f} s, "
        f"trunk calls: {retrain_calls}"
    )
    write_json(args.json, res)


if __name__ == "__main__":
    main()
