"""Byte trunk shapes side by side on accuracy: the same rows, epochs and heads for each.

    .venv/bin/python scripts/build_content_bundle.py --rows bench/.cache/content_rows.jsonl.gz
    .venv/bin/python bench/byte_shapes.py [--preset init|bag] [--rows 40000] [--epochs 3]
        [--json FILE]

``--preset init`` compares how the bag table starts, ``bag`` how the bag is
weighed and sized. For each shape (a JSON object of ByteConfig fields, with
``path_dropout``, ``bag_init``, ``dropout``, ``crop`` and ``crop_tasks`` for
training): trains a byte trunk on the
same random ``--rows`` rows of the content data's train part with all four
tasks, fits a LogisticRegression
(C=10) per head on 30,000 of those rows at the largest tier, and scores the
test part: code_language accuracy on code rows, language accuracy on real
texts of >= 20 characters, kind accuracy, risk micro-F1 (threshold 0.5), and
what ``def f(): return 1`` is answered. Minutes per shape on 2 cores.
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
sys.path.insert(0, str(HERE))

PRESETS = {
    # how to weigh and size the bag (measured with the bag table started N(0, 1))
    "bag": {
        "bag 8192 x 128, mean (the earlier shape)": {
            "bag": 8192, "bag_norm": "mean", "bag_init": "normal"
        },
        "bag 8192 x 128, l2log": {"bag": 8192, "bag_init": "normal"},
        "bag 32768 x 64, l2log": {"bag": 32768, "bag_dim": 64, "bag_init": "normal"},
        "bag 16384 x 128, l2log (default)": {"bag_init": "normal"},
    },
    # how to start the bag table
    "init": {
        "bag table started N(0, 1) (the earlier training)": {"bag_init": "normal"},
        "bag table started small (default)": {},
    },
}  # fmt: skip
TASKS = {
    "code_language": "multiclass",
    "language": "multiclass",
    "kind": "multiclass",
    "risk": "multilabel",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, default=HERE / ".cache" / "content_rows.jsonl.gz")
    ap.add_argument("--rows", type=int, default=40_000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="init", help="shapes compared")
    ap.add_argument("--shape", action="append", help="name=JSON (repeatable; instead of --preset)")
    ap.add_argument("--json")
    args = ap.parse_args()
    from _common import machine, write_json
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.preprocessing import MultiLabelBinarizer

    from manyheads.train.byte import train_byte_trunk
    from manyheads.trunks.byte import ByteConfig

    shapes = PRESETS[args.preset]
    if args.shape:
        shapes = {}
        for item in args.shape:
            name, _, doc = item.partition("=")
            shapes[name] = json.loads(doc)
    with gzip.open(args.data, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    train = [r for r in rows if r["split"] == "train"]
    random.Random(0).shuffle(train)
    train = train[: args.rows]
    test = [r for r in rows if r["split"] == "test"]
    heads_rows = train[:30_000]
    select = {
        "code_language": [i for i, r in enumerate(test) if r["kind"] == "code"],
        "language": [
            i
            for i, r in enumerate(test)
            if r["language"] and len(r["text"]) >= 20 and not r["generated"]
        ],
        "kind": list(range(len(test))),
    }
    mlb = MultiLabelBinarizer().fit([r["risk"] for r in rows])
    y_risk = mlb.transform([r["risk"] for r in heads_rows])
    want_risk = mlb.transform([r["risk"] for r in test])
    print(f"machine: {machine()}; {len(train)} train rows, {len(test)} test rows")
    results: dict[str, Any] = {"machine": machine(), "rows": len(train), "shapes": {}}
    for name, change in shapes.items():
        change = dict(change)
        path_dropout = change.pop("path_dropout", 0.5)
        bag_init = change.pop("bag_init", "small")
        dropout = change.pop("dropout", 0.0)
        crop = change.pop("crop", 0.0)
        crop_tasks = change.pop("crop_tasks", None)
        config = ByteConfig.from_settings(change)
        t0 = time.perf_counter()
        trunk, summary = train_byte_trunk(
            [r["text"] for r in train],
            {k: ([r[k] for r in train], kind) for k, kind in TASKS.items()},
            config=config, epochs=args.epochs, batch_size=128, lr=3e-3,
            path_dropout=path_dropout, bag_init=bag_init, dropout=dropout,
            crop=crop, crop_tasks=crop_tasks,
        )  # fmt: skip
        x_tr = trunk.encode([r["text"] for r in heads_rows])
        x_te = trunk.encode([r["text"] for r in test])
        out: dict[str, Any] = {
            "config": change, "path_dropout": path_dropout, "bag_init": bag_init,
            "dropout": dropout, "crop": crop, "crop_tasks": crop_tasks,
        }  # fmt: skip
        for head in ("code_language", "language", "kind"):
            idx = [i for i, r in enumerate(heads_rows) if r[head] is not None]
            clf = LogisticRegression(C=10, max_iter=1000)
            clf.fit(x_tr[idx], [heads_rows[i][head] for i in idx])
            got = clf.predict(x_te)
            sel = select[head]
            out[head] = accuracy_score([test[i][head] for i in sel], [got[i] for i in sel])
            if head == "code_language":
                out["def f(): return 1"] = str(clf.predict(trunk.encode(["def f(): return 1"]))[0])
        got_risk = np.stack(
            [
                LogisticRegression(C=10, max_iter=1000).fit(x_tr, y_risk[:, j]).predict(x_te)
                for j in range(y_risk.shape[1])
            ],
            axis=1,
        )
        out["risk_micro_f1"] = f1_score(want_risk, got_risk, average="micro")
        out["trunk_seconds"] = summary.seconds
        out["seconds"] = time.perf_counter() - t0
        results["shapes"][name] = out
        print(
            f"{name:44s} code {out['code_language']:.3f}  language {out['language']:.3f}  "
            f"kind {out['kind']:.3f}  risk {out['risk_micro_f1']:.3f}  "
            f"'def f()' {out['def f(): return 1']}  trunk {summary.seconds:.0f} s",
            flush=True,
        )
    write_json(args.json, results)


if __name__ == "__main__":
    main()
