"""Quality of manyheads heads vs scikit-learn LogisticRegression on the same embeddings.

English Debian package descriptions, split 80/20 by source-package family
(``group``). Both models see the same all-MiniLM-L6-v2 embeddings of the same
training rows; manyheads holds out 20% of them (grouped) for temperature
scaling and thresholds, then refits on all. Reports test accuracy, macro-F1,
ECE, and validation ECE before / after temperature scaling; plus a multilabel
``tags`` head's micro-F1.

    .venv/bin/python bench/section_quality.py [--rows 10000] [--trunk minilm]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from _common import CACHE_DIR, debian_rows, grouped_split, machine, write_json
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.preprocessing import MultiLabelBinarizer

from manyheads import Bundle, EmbeddingCache
from manyheads.evaluate import expected_calibration_error


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--trunk", default="minilm")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()

    rows, source = debian_rows(args.rows)
    train, test = grouped_split(rows)
    bundle = Bundle(trunk=args.trunk, cache=EmbeddingCache(CACHE_DIR / "embeddings.sqlite"))
    t = time.perf_counter()
    X_train = bundle.embed([r["text"] for r in train], progress=True)
    X_test = bundle.embed([r["text"] for r in test], progress=True)
    print(
        f"data: {source}, {len(train)} train / {len(test)} test rows (grouped split), "
        f"trunk {bundle.trunk_name}; embedding took {time.perf_counter() - t:.1f} s"
    )
    print(f"machine: {machine()}")

    y_train = np.array([r["section"] for r in train])
    y_test = np.array([r["section"] for r in test])

    # scikit-learn baseline, as people write it
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lr = LogisticRegression(max_iter=1000).fit(X_train, y_train)
    lr_seconds = time.perf_counter() - t
    lr_proba = lr.predict_proba(X_test)
    lr_pred = lr.classes_[lr_proba.argmax(1)]

    def scores(pred: np.ndarray, proba: np.ndarray) -> dict[str, float]:
        return {
            "accuracy": float(accuracy_score(y_test, pred)),
            "macro_f1": float(f1_score(y_test, pred, average="macro", zero_division=0)),
            "ece": expected_calibration_error(proba.max(1), pred == y_test),
        }

    res: dict = {
        "source": source,
        "n_train": len(train),
        "n_test": len(test),
        "sklearn_lr": {**scores(lr_pred, lr_proba), "fit_seconds": lr_seconds},
    }
    train_texts = [r["text"] for r in train]
    groups = [r["group"] for r in train]
    for C in (1.0, "auto"):
        # grouped validation split inside the training rows, temperature scaling, refit
        summary = bundle.fit_head("section", train_texts, list(y_train), groups=groups, C=C)
        head = bundle.heads["section"]
        proba = head.predict_proba(X_test)
        val = summary.metrics
        # the same head on other grouped validation splits: how much does ECE move?
        val_eces = [val["ece"]]
        for seed in range(1, 5):
            other = Bundle(trunk=bundle.trunk, cache=bundle.cache)
            s = other.fit_head("section", train_texts, list(y_train), groups=groups, C=C, seed=seed)
            val_eces.append(s.metrics["ece"])
        res[f"manyheads_C_{C}"] = {
            **scores(head.classes_[proba.argmax(1)], proba),
            "fit_seconds": summary.seconds,
            "C_": head.C_,
            "temperature": head.temperature_,
            "val_accuracy": val["accuracy"],
            "val_ece_before_T": val.get("ece_uncalibrated"),
            "val_ece_after_T": val["ece"],
            "val_ece_after_T_5_splits": val_eces,
        }

    # multilabel tags head
    tags_train = [r["tags"] for r in train]
    tsum = bundle.fit_head(
        "tags",
        [r["text"] for r in train],
        tags_train,
        kind="multilabel",
        groups=[r["group"] for r in train],
    )
    tags_head = bundle.heads["tags"]
    mlb = MultiLabelBinarizer(classes=tags_head.classes_.tolist())
    known = set(tags_head.classes_.tolist())
    Y_test = mlb.fit_transform([[t for t in r["tags"] if t in known] for r in test])
    P = tags_head.predict(X_test)
    res["tags"] = {
        "labels": len(tags_head.classes_),
        "micro_f1": float(f1_score(Y_test, P, average="micro", zero_division=0)),
        "macro_f1": float(f1_score(Y_test, P, average="macro", zero_division=0)),
        "val_micro_f1": tsum.metrics["micro_f1"],
        "fit_seconds": tsum.seconds,
    }

    b = res["sklearn_lr"]
    print(f"{'section':<32}{'accuracy':>10}{'macro_f1':>10}{'test_ece':>10}{'fit_s':>8}")
    print(
        f"{'scikit-learn LR (C=1)':<32}{b['accuracy']:>10.4f}{b['macro_f1']:>10.4f}"
        f"{b['ece']:>10.4f}{b['fit_seconds']:>8.2f}"
    )
    for C in (1.0, "auto"):
        a = res[f"manyheads_C_{C}"]
        label = f"manyheads head (C={C}, C_={a['C_']:g})"
        print(
            f"{label:<32}{a['accuracy']:>10.4f}{a['macro_f1']:>10.4f}"
            f"{a['ece']:>10.4f}{a['fit_seconds']:>8.2f}"
        )
    for C in (1.0, "auto"):
        a = res[f"manyheads_C_{C}"]
        e = a["val_ece_after_T_5_splits"]
        print(
            f"C={C}: accuracy vs LR {100 * (a['accuracy'] - b['accuracy']):+.2f} points; "
            f"validation ECE {a['val_ece_before_T']:.4f} before temperature scaling, "
            f"{a['val_ece_after_T']:.4f} after (T = {a['temperature']:.3f}); "
            f"after, over 5 grouped splits: mean {np.mean(e):.4f}, "
            f"min {min(e):.4f}, max {max(e):.4f}"
        )
    t_ = res["tags"]
    print(
        f"tags (multilabel, {t_['labels']} labels): test micro-F1 {t_['micro_f1']:.4f}, "
        f"macro-F1 {t_['macro_f1']:.4f}; fit {t_['fit_seconds']:.1f} s"
    )
    write_json(args.json, res)


if __name__ == "__main__":
    main()
