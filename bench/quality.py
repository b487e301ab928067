"""Quality of manyheads configurations vs the strongest simple baselines, on real data.

Five tasks, each with a grouped 80/20 split (no source-package family or source
file on both sides): Debian package descriptions in all 30 languages —
``section`` (multiclass), ``lang`` (multiclass), ``role`` and ``interface``
(multilabel) — and source-code snippets, ``lang`` (17 languages).

Side by side in one run:

- TF-IDF char n-grams (1-5, word-boundary, sublinear tf) + LogisticRegression
  (scikit-learn defaults; one-vs-rest for multilabel);
- MiniLM + LogisticRegression (the same model on frozen all-MiniLM-L6-v2
  embeddings, by hand);
- manyheads heads on the trunks ``minilm``, ``tfidf`` and ``minilm+tfidf``,
  linear with C=1 and C="auto", and MLP heads where the feature width allows.

Reports accuracy (exact match for multilabel), macro-F1, ECE, training seconds
and prediction texts/s.

    .venv/bin/python bench/quality.py [--rows 4000] [--code-rows 3000] [--json FILE]
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np
from _common import CACHE_DIR, corpus_rows, grouped_split, machine, write_json
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.multiclass import OneVsRestClassifier
from sklearn.preprocessing import MultiLabelBinarizer

from manyheads import Bundle, EmbeddingCache
from manyheads.evaluate import expected_calibration_error

TASKS = [  # (corpus, field, kind)
    ("debdesc", "section", "multiclass"),
    ("debdesc", "lang", "multiclass"),
    ("debdesc", "role", "multilabel"),
    ("debdesc", "interface", "multilabel"),
    ("code", "lang", "multiclass"),
]


def _metrics(kind: str, y_true: Any, proba: np.ndarray, pred: Any) -> dict[str, float]:
    if kind == "multilabel":
        conf = np.maximum(proba, 1 - proba)
        return {
            "accuracy": float(accuracy_score(y_true, pred)),
            "macro_f1": float(f1_score(y_true, pred, average="macro", zero_division=0)),
            "ece": expected_calibration_error(conf, (proba >= 0.5) == (y_true > 0)),
        }
    return {
        "accuracy": float(accuracy_score(y_true, pred)),
        "macro_f1": float(f1_score(y_true, pred, average="macro", zero_division=0)),
        "ece": expected_calibration_error(proba.max(1), np.asarray(pred) == np.asarray(y_true)),
    }


def sklearn_baseline(kind, X_train, y_train, X_test, y_test, classes):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "multilabel":
            clf = OneVsRestClassifier(LogisticRegression(max_iter=1000)).fit(X_train, y_train)
            proba = clf.predict_proba(X_test)
            return _metrics(kind, y_test, proba, (proba >= 0.5).astype(int))
        clf = LogisticRegression(max_iter=1000).fit(X_train, y_train)
        proba = clf.predict_proba(X_test)
        return _metrics(kind, y_test, proba, clf.classes_[proba.argmax(1)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=4000, help="Debian rows (all languages)")
    ap.add_argument("--code-rows", type=int, default=3000)
    ap.add_argument(
        "--configs",
        default=(
            "minilm:1,minilm:auto,tfidf:auto,minilm+tfidf:1,minilm+tfidf:auto,"
            "minilm+tfidf:auto:accuracy,minilm:mlp"
        ),
        help="comma-separated TRUNK:C (or TRUNK:mlp) manyheads configurations",
    )
    ap.add_argument(
        "--finetune-epochs",
        type=int,
        default=1,
        help="LP-FT epochs of MiniLM on the Debian training rows (0: skip)",
    )
    ap.add_argument("--finetune-max-length", type=int, default=128)
    ap.add_argument("--tasks", help="comma-separated subset, e.g. debdesc/role,code/lang")
    ap.add_argument("--no-speed", action="store_true", help="skip the throughput measurement")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    cache = EmbeddingCache(CACHE_DIR / "embeddings.sqlite")
    corpora = {
        "debdesc": corpus_rows("debdesc", args.rows),
        "code": corpus_rows("code", args.code_rows),
    }
    splits = {name: grouped_split(rows) for name, rows in corpora.items()}
    # TRUNK:C[:THRESHOLDS[:pw]], or TRUNK:mlp[:THRESHOLDS]; pw: part_weights="auto"
    configs = [[*c.split(":"), "f1", ""][:4] for c in args.configs.split(",")]
    results: dict[str, Any] = {"configs": args.configs, "tasks": {}}
    tuned: Bundle | None = None
    if args.finetune_epochs > 0:
        # one multi-task fine-tune (LP-FT) of MiniLM on the Debian training rows, all four
        # Debian tasks, through Bundle.finetune: 20% of the rows (grouped) are held out of
        # fine-tuning and the heads are calibrated on them; heads C=auto, accuracy thresholds
        train = splits["debdesc"][0]
        folder = CACHE_DIR / (
            f"ft-bundle-{len(train)}-e{args.finetune_epochs}-l{args.finetune_max_length}"
        )
        if (folder / "bundle.json").exists():
            tuned = Bundle.load(folder, cache=cache)
        else:
            tuned = Bundle(trunk="minilm", cache=cache)
            tr_texts = [r["text"] for r in train]
            groups = [r["group"] for r in train]
            tasks = {
                f: (k, [list(r[f] or []) if k == "multilabel" else r[f] for r in train])
                for c, f, k in TASKS
                if c == "debdesc"
            }
            for f, (k, labels) in tasks.items():
                tuned.fit_head(
                    f, tr_texts, labels, kind=k, groups=groups, C="auto", thresholds="accuracy"
                )
            t = time.perf_counter()
            ft = tuned.finetune(
                tr_texts,
                tasks,
                folder,
                groups=groups,
                epochs=args.finetune_epochs,
                max_length=args.finetune_max_length,
                progress=True,
            )
            tuned.save(folder)
            results["finetune"] = {
                "seconds": time.perf_counter() - t,
                "finetune_seconds": ft.report.seconds,
                "steps": ft.report.steps,
                "losses": ft.report.losses,
            }
            print(
                f"fine-tuned MiniLM on {len(train)} Debian rows (80% tuned, 20% held out for "
                f"calibration), 4 tasks: {ft.report.seconds:.0f} s, heads refitted: "
                f"{time.perf_counter() - t:.0f} s in all; loss per epoch {ft.report.losses}"
            )

    wanted = set(args.tasks.split(",")) if args.tasks else None
    for corpus, field, kind in TASKS:
        if wanted is not None and f"{corpus}/{field}" not in wanted:
            continue
        train, test = splits[corpus]
        task = f"{corpus}/{field}"
        tr_texts = [r["text"] for r in train]
        te_texts = [r["text"] for r in test]
        y_tr = [list(r[field] or []) if kind == "multilabel" else r[field] for r in train]
        y_te = [list(r[field] or []) if kind == "multilabel" else r[field] for r in test]
        if kind == "multilabel":
            mlb = MultiLabelBinarizer().fit(y_tr)
            known = set(mlb.classes_)
            Y_tr = mlb.transform(y_tr)
            Y_te = mlb.transform([[v for v in labs if v in known] for labs in y_te])
        else:
            Y_tr, Y_te = np.array(y_tr), np.array(y_te)
        row: dict[str, Any] = {"n_train": len(train), "n_test": len(test)}

        t = time.perf_counter()
        vec = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 5), sublinear_tf=True, min_df=2)
        Xtr = vec.fit_transform(tr_texts)
        m = sklearn_baseline(kind, Xtr, Y_tr, vec.transform(te_texts), Y_te, None)
        row["tfidf+lr"] = {**m, "train_s": time.perf_counter() - t}

        mini = Bundle(trunk="minilm", cache=cache)
        E_tr, E_te = mini.embed(tr_texts, progress=True), mini.embed(te_texts, progress=True)
        t = time.perf_counter()
        m = sklearn_baseline(kind, E_tr, Y_tr, E_te, Y_te, None)
        row["minilm+lr"] = {**m, "train_s": time.perf_counter() - t}

        if tuned is not None and corpus == "debdesc":
            ev = tuned.evaluate(te_texts, {field: y_te})[field]
            m = tuned.head_info[field]["metrics"]
            row["manyheads minilm-ft auto" + (" thr=acc" if kind == "multilabel" else "")] = {
                "accuracy": ev["accuracy"],
                "macro_f1": ev["macro_f1"],
                "ece": ev["ece"],
                "train_s": float("nan"),
                "val_ece": m.get("ece"),
                "C_": getattr(tuned.heads[field], "C_", None),
            }
        for trunk, C, thr, pw in configs:
            bundle = Bundle(trunk=trunk, cache=cache)
            t = time.perf_counter()
            head_type = "mlp" if C == "mlp" else "linear"
            kwargs: dict[str, Any] = (
                {"head": head_type}
                if head_type == "mlp"
                else {"C": (C if C == "auto" else float(C))}
            )
            s = bundle.fit_head(
                field,
                tr_texts,
                y_tr,
                kind=kind,
                groups=[r["group"] for r in train],
                thresholds=thr,
                part_weights="auto" if pw == "pw" else "fixed",
                **kwargs,
            )
            train_s = time.perf_counter() - t
            ev = bundle.evaluate(te_texts, {field: y_te})[field]
            head = bundle.heads[field]
            label = trunk
            suffix = "" if thr == "f1" or kind != "multilabel" else " thr=acc"
            suffix += " pw=auto" if pw == "pw" else ""
            row[f"manyheads {label} {C}{suffix}"] = {
                "accuracy": ev["accuracy"],
                "macro_f1": ev["macro_f1"],
                "ece": ev["ece"],
                "train_s": train_s,
                "fit_s": s.seconds,
                "val_ece": s.metrics.get("ece"),
                "cv_ece": s.metrics.get("ece_cv"),
                "C_": getattr(head, "C_", None),
                "part_weights": (s.metrics.get("part_weights") or {}).get("multipliers"),
            }
        results["tasks"][task] = row
        print(f"\n{task} ({kind}; {len(train)} train / {len(test)} test rows)")
        print(f"{'model':<34}{'accuracy':>9}{'macro_f1':>9}{'ece':>8}{'train_s':>9}")
        for name, m in row.items():
            if isinstance(m, dict):
                extra = f"  C_={m['C_']:g}" if m.get("C_") is not None else ""
                if m.get("val_ece") is not None:
                    extra += f"  val_ece={m['val_ece']:.4f}"
                if m.get("cv_ece") is not None:
                    extra += f"  cv_ece={m['cv_ece']:.4f}"
                if m.get("part_weights") is not None:
                    extra += f"  parts x{m['part_weights']}"
                print(
                    f"{name:<34}{m['accuracy']:>9.4f}{m['macro_f1']:>9.4f}{m['ece']:>8.4f}"
                    f"{m['train_s']:>9.1f}{extra}"
                )

    if args.no_speed:
        write_json(args.json, results)
        return
    # prediction throughput of each trunk on real Debian texts (no cache)
    texts = [r["text"] for r in splits["debdesc"][1][:400]]
    speed = {}
    for trunk in dict.fromkeys(c[0] for c in configs):
        bundle = Bundle(trunk=trunk, cache=cache)
        bundle.fit_head(
            "section",
            [r["text"] for r in splits["debdesc"][0]],
            [r["section"] for r in splits["debdesc"][0]],
        )
        bundle.predict(texts[:16])
        t = time.perf_counter()
        bundle.predict(texts)
        speed[trunk] = len(texts) / (time.perf_counter() - t)
    results["predict_texts_per_s"] = speed
    print(
        "\nprediction texts/s (one head, 400 Debian texts, no cache): "
        + ", ".join(f"{k} {v:.1f}" for k, v in speed.items())
    )
    write_json(args.json, results)


if __name__ == "__main__":
    main()
