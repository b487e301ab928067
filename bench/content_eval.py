"""The built-in `content` bundle next to TF-IDF + LogisticRegression and `minilm` heads,
per head, on the same grouped test split.

    .venv/bin/python scripts/build_content_bundle.py --rows bench/.cache/content_rows.jsonl.gz
    .venv/bin/python bench/content_eval.py [--json bench/results/content_eval.json]

Rows and split come from the build (``--rows``): train 70% / validation 15% /
test 15% by group (source file, program, package family). Every system is
trained on the train part and scored on the test part:

- ``content`` (byte trunk, every tier the bundle holds heads for);
- TF-IDF + LogisticRegression, one model per head: character n-grams (1-4,
  within word boundaries; `--word` adds word 1-2-grams as a second system),
  sublinear tf, 200,000 features at most (fitted on the whole train part),
  C=10, lbfgs. code_language learns from every code row of the train part plus
  as many random non-code (`none`) rows; language, kind and risk (one binary
  model per label) from a random 40,000 train rows carrying the label (the
  bundle's heads also learn from 40,000 rows; a fit on all ~100,000 language
  rows ran over 15 minutes on 2 cores);
- `minilm` heads (all-MiniLM-L6-v2 ONNX trunk, linear heads fitted like the
  bundle's, C auto) trained on a random 12,000 rows of the train part (the
  trunk encodes ~100 texts/s here), scored on a random 6,000 test rows.

``--against FOLDER`` scores another content bundle (an earlier build) at its
largest tier on the same rows, side by side.

Scores (``content_data.score``): code_language accuracy (all rows; code rows
only), language accuracy on real (not generated) natural-language texts of >= 20
characters and on all real ones, the share of code / config / data / log rows
answered ``zxx`` (all, and per kind), kind accuracy, risk micro-F1 and per-label
F1, the share of real clean texts given any risk label; per snippet type (SQL,
Markdown, YAML, scripts opening with a licence comment) the accuracy of kind and
code_language and the zxx share; the answers to a few pasted examples.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "scripts"))

import content_data as cd  # noqa: E402

HEADS = {"code_language": "multiclass", "language": "multiclass", "kind": "multiclass"}
# the scores shown per system: (key of content_data.score, column title)
COLUMNS = [
    ("code_language", "code_lang"),
    ("code_language_on_code", "code_lang (code)"),
    ("language_20", "language >=20ch"),
    ("language_all", "language all"),
    ("zxx", "zxx (code..log)"),
    ("kind", "kind"),
    ("risk_micro_f1", "risk micro-F1"),
    ("risk_false_alarms_real", "risk false alarms"),
]
# what a new user pastes (the snippets that had wrong answers)
EXAMPLES = [
    "SELECT * FROM users;",
    "# Install\n\nRun `pip install foo`, then:\n\n```\nfoo --help\n```\n",
    "name: build\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n",
    "#!/bin/sh\n# Copyright (C) 2020 Free Software Foundation, Inc.\n#\n# This program is free"
    " software; you can redistribute it and/or modify\n# it under the terms of the GNU General"
    " Public License.\n\nset -e\n",
    "2024-05-01T12:00:03Z INFO worker[12]: job 8812 done in 1.3s",
    '{"id": 12, "name": "widget", "tags": ["a", "b"]}',
    "hello",
]


def read_rows(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def tfidf_lr(train: list[dict], test: list[dict], analyzer: str) -> tuple[dict, float]:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    t0 = time.perf_counter()
    if analyzer == "word":
        vec = TfidfVectorizer(
            ngram_range=(1, 2), sublinear_tf=True, max_features=200_000,
            token_pattern=r"(?u)\b\w+\b|[^\w\s]",
        )  # fmt: skip
    else:
        vec = TfidfVectorizer(
            analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True, max_features=200_000
        )
    Xtr = vec.fit_transform([r["text"] for r in train])
    Xte = vec.transform([r["text"] for r in test])
    rng = random.Random(0)
    pred: dict[str, list[Any]] = {}
    for name in HEADS:
        rows = [i for i, r in enumerate(train) if r[name] is not None]
        if name == "code_language":  # every code row, as many non-code ones
            code = [i for i in rows if train[i]["kind"] == "code"]
            rest = [i for i in rows if train[i]["kind"] != "code"]
            rows = sorted(code + rng.sample(rest, min(len(rest), len(code))))
        else:
            rows = sorted(rng.sample(rows, min(len(rows), 40_000)))
        clf = LogisticRegression(C=10.0, max_iter=300)
        clf.fit(Xtr[rows], [train[i][name] for i in rows])
        pred[name] = list(clf.predict(Xte))
        print(
            f"  tfidf {analyzer} {name}: {len(rows)} rows, {time.perf_counter() - t0:.0f} s: "
            + json.dumps(cd.score(test, {name: pred[name]})),
            flush=True,
        )
    risk: list[list[str]] = [[] for _ in test]
    some = sorted(rng.sample(range(len(train)), min(40_000, len(train))))
    for k in cd.RISKS:
        y = np.array([k in train[i]["risk"] for i in some])
        clf = LogisticRegression(C=10.0, max_iter=300).fit(Xtr[some], y)
        for i in np.flatnonzero(clf.predict(Xte)):
            risk[i].append(k)
    pred["risk"] = risk
    return pred, time.perf_counter() - t0


def bundle_pred(bundle: Any, test: list[dict]) -> tuple[dict, float]:
    t0 = time.perf_counter()
    answers = bundle.predict([r["text"] for r in test])
    seconds = time.perf_counter() - t0
    return cd.answers_to_labels(answers), seconds


def minilm(train: list[dict], val: list[dict], test: list[dict], n: int) -> tuple[dict, float]:
    from _common import CACHE_DIR

    from manyheads import Bundle
    from manyheads.cache import EmbeddingCache

    random.Random(0).shuffle(train := train[:])
    train = train[:n]
    t0 = time.perf_counter()
    bundle = Bundle(trunk="minilm", cache=EmbeddingCache(CACHE_DIR / "embeddings.sqlite"))
    for name, kind in {**HEADS, "risk": "multilabel"}.items():
        tr = [r for r in train if r[name] is not None]
        va = [r for r in val if r[name] is not None][:3000]
        bundle.fit_head(
            name, [r["text"] for r in tr], [r[name] for r in tr], kind=kind,
            val_texts=[r["text"] for r in va], val_labels=[r[name] for r in va],
            C="auto", thresholds="f1", keep_data=False,
        )  # fmt: skip
    pred, _ = bundle_pred(bundle, test)
    return pred, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=Path, default=HERE / ".cache" / "content_rows.jsonl.gz")
    ap.add_argument("--bundle", default="content")
    ap.add_argument("--minilm-train", type=int, default=12_000)
    ap.add_argument("--minilm-test", type=int, default=6_000)
    ap.add_argument(
        "--against",
        action="append",
        default=[],
        help="another content bundle folder (e.g. an earlier build) scored at its largest "
        "tier beside --bundle (repeatable)",
    )
    ap.add_argument("--no-tfidf", action="store_true")
    ap.add_argument("--no-minilm", action="store_true")
    ap.add_argument("--word", action="store_true", help="also TF-IDF word n-grams + LR")
    ap.add_argument("--json")
    args = ap.parse_args()
    from _common import machine, write_json

    from manyheads import Bundle

    rows = read_rows(args.rows)
    part = {s: [r for r in rows if r["split"] == s] for s in ("train", "val", "test")}
    print(f"machine: {machine()}")
    print({s: len(v) for s, v in part.items()}, flush=True)
    results: dict[str, Any] = {"machine": machine(), "n": {s: len(v) for s, v in part.items()}}
    systems: dict[str, Any] = {}
    main_bundle = Bundle.load(args.bundle, cache=None)
    tiers = [main_bundle.trunk.dim, *main_bundle.tiers]
    for tier in dict.fromkeys(tiers):
        b = main_bundle if tier == main_bundle.trunk.dim else Bundle.load(args.bundle, tier=tier)
        pred, sec = bundle_pred(b, part["test"])
        systems[f"content (tier {tier})"] = {**cd.score(part["test"], pred), "seconds": sec}
        print(f"content tier {tier}: done", flush=True)
    examples: dict[str, Any] = {"content": main_bundle.predict(EXAMPLES)}
    for other in args.against:
        b = Bundle.load(Path(other), cache=None)
        pred, sec = bundle_pred(b, part["test"])
        systems[f"{other} (tier {b.trunk.dim})"] = {**cd.score(part["test"], pred), "seconds": sec}
        examples[other] = b.predict(EXAMPLES)
        print(f"{other}: done", flush=True)
    for analyzer in () if args.no_tfidf else ("char", "word") if args.word else ("char",):
        pred, sec = tfidf_lr(part["train"], part["test"], analyzer)
        systems[f"TF-IDF {analyzer} + LR"] = {**cd.score(part["test"], pred), "seconds": sec}
        print(f"tfidf {analyzer}: {sec:.0f} s", flush=True)
    if not args.no_minilm:
        test = random.Random(0).sample(part["test"], min(args.minilm_test, len(part["test"])))
        pred, sec = minilm(part["train"], part["val"], test, args.minilm_train)
        systems[f"minilm heads ({args.minilm_train} train, {len(test)} test rows)"] = {
            **cd.score(test, pred),
            "seconds": sec,
        }
    results["systems"] = systems
    cols = COLUMNS
    print(f"\n{'system':34s} " + " ".join(f"{c[1]:>17s}" for c in cols))
    for name, s in systems.items():
        print(f"{name:34s} " + " ".join(f"{s[c[0]]:17.3f}" for c in cols))
    print("\nzxx by kind (share of held-out rows of each kind answered zxx)")
    print(f"{'system':34s} " + " ".join(f"{k:>11s}" for k in cd.ZXX_KINDS))
    for name, s in systems.items():
        print(
            f"{name:34s} " + " ".join(f"{s['zxx_by_kind'].get(k, 0):11.3f}" for k in cd.ZXX_KINDS)
        )
    print("\nsnippets (held-out; kind / code_language accuracy, zxx share)")
    for kind in cd.SNIPPET_TYPES:
        for name, s in systems.items():
            got = s.get("snippets", {}).get(kind)
            if got:
                cells = ", ".join(f"{k} {v:.3f}" for k, v in got.items() if k != "n")
                print(f"  {kind:16s} n={got['n']:<5d} {name:34s} {cells}")
    print("\nexamples")
    for i, text in enumerate(EXAMPLES):
        print(f"  {text[:60]!r}")
        for name, answers in examples.items():
            a = answers[i]
            print(
                f"    {name:34s} kind {a['kind']['label']}, code_language "
                f"{a['code_language']['label']}, language {a['language']['label']}"
            )
    results["examples"] = examples
    print("\nrisk F1 per label")
    print(f"{'system':34s} " + " ".join(f"{k:>11s}" for k in cd.RISKS))
    for name, s in systems.items():
        print(f"{name:34s} " + " ".join(f"{s['risk_f1'][k]:11.3f}" for k in cd.RISKS))
    write_json(args.json, results)


if __name__ == "__main__":
    main()
