"""Four real teachers for bench/absorb.py: all-MiniLM-L6-v2 fine-tuned as a Hugging Face
sequence-classification model on each of four tasks of ../shared/data, saved with
``save_pretrained`` (safetensors, ``id2label``; the role teacher is multilabel).

Tasks: Debian ``section`` (English descriptions), Debian ``lang`` (30 languages), code
``lang`` (17 languages), Debian ``role`` (multilabel). Each teacher learns from its own
rows (whole groups); bench/absorb.py uses other groups for the unlabelled texts and the
gold-labelled test rows (the group lists are written next to the teachers).

    python -u bench/absorb_teachers.py [--rows 1000] [--epochs 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT

DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "bench" / ".cache" / "absorb-teachers"
MAX_LENGTH = 128


def read_groups(name: str) -> dict[str, list[dict[str, Any]]]:
    """A corpus's rows by group."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    with gzip.open(DATA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            by_group.setdefault(row["group"], []).append(row)
    return by_group


def task_rows(task: str, by_group: dict[str, list[dict[str, Any]]], groups: list[str]) -> list:
    rows = [r for g in groups for r in by_group[g]]
    if task == "section":
        return [r for r in rows if r.get("lang") == "en" and r.get("section")]
    if task == "role":
        return [r for r in rows if r.get("lang") == "en"]
    return rows  # lang (debdesc), code


TASKS = {  # name: (corpus, label field, kind)
    "section": ("debdesc", "section", "multiclass"),
    "lang": ("debdesc", "lang", "multiclass"),
    "code": ("code", "lang", "multiclass"),
    "role": ("debdesc", "role", "multilabel"),
}


def split_groups(seed: int = 0) -> dict[str, dict[str, list[str]]]:
    """Each corpus's groups, shuffled, cut into teacher / absorb / test thirds of groups
    (teacher 30%, absorb 50%, test 20%)."""
    out = {}
    for corpus in ("debdesc", "code"):
        groups = sorted(read_groups(corpus))
        random.Random(seed).shuffle(groups)
        a, b = int(0.3 * len(groups)), int(0.8 * len(groups))
        out[corpus] = {"teacher": groups[:a], "absorb": groups[a:b], "test": groups[b:]}
    return out


def train_teacher(name: str, rows: list[dict[str, Any]], epochs: int, seed: int) -> dict:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from manyheads.trunks.transformer import minilm_path

    _, fld, kind = TASKS[name]
    if kind == "multilabel":
        labels = sorted({x for r in rows for x in r.get(fld) or []})
    else:
        labels = sorted({r[fld] for r in rows})
    index = {label: i for i, label in enumerate(labels)}
    source = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(str(source), local_files_only=True)
    tokenizer.model_max_length = MAX_LENGTH
    model = AutoModelForSequenceClassification.from_pretrained(
        str(source),
        local_files_only=True,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id=index,
        problem_type="multi_label_classification" if kind == "multilabel" else None,
    )
    texts = [r["text"] for r in rows]
    if kind == "multilabel":
        y = torch.zeros((len(rows), len(labels)))
        for i, r in enumerate(rows):
            for x in r.get(fld) or []:
                y[i, index[x]] = 1.0
    else:
        y = torch.tensor([index[r[fld]] for r in rows])
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    batch = 16
    steps = epochs * ((len(texts) + batch - 1) // batch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / (0.1 * steps)) * max(0.0, 1 - s / steps)
    )
    model.train()
    started = time.perf_counter()
    order_rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        order = order_rng.permutation(len(texts))
        total = 0.0
        for start in range(0, len(order), batch):
            idx = order[start : start + batch]
            enc = tokenizer(
                [texts[i] for i in idx],
                truncation=True,
                max_length=MAX_LENGTH,
                padding=True,
                return_tensors="pt",
            )
            out = model(**enc, labels=y[idx])
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            total += float(out.loss.detach()) * len(idx)
        print(f"  {name}: epoch {epoch + 1} loss {total / len(texts):.4f}", flush=True)
    model.eval()
    folder = OUT / name
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    return {
        "rows": len(rows),
        "labels": len(labels),
        "kind": kind,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1000, help="training rows per teacher")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    splits = split_groups(args.seed)
    (OUT / "groups.json").write_text(json.dumps(splits))
    made = {}
    for name, (corpus, _, _) in TASKS.items():
        by_group = read_groups(corpus)
        rows = task_rows(name, by_group, splits[corpus]["teacher"])
        random.Random(args.seed).shuffle(rows)
        made[name] = train_teacher(name, rows[: args.rows], args.epochs, args.seed)
        print(name, made[name], flush=True)
    (OUT / "teachers.json").write_text(json.dumps(made, indent=2))


if __name__ == "__main__":
    main()
