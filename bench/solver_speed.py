"""The linear solver with and without whitening, side by side in one run.

Real Debian descriptions (every language: ``lang`` of about 30 classes, ``section`` of
about 55), encoded by ``--trunk`` (default ``static``; ``minilm`` encodes 10,000 texts once,
cached in ``bench/.cache``), grouped train / test split. For each head:

- the solver alone (``fit_softmax``) at C = 1, 16, 256 and 4,096, cold: L-BFGS steps,
  seconds, test accuracy;
- ``fit_head(C="auto")`` as ``manyheads train`` runs it (the C walk, temperature,
  refit): seconds and test accuracy.

"Plain" is the solver with whitening turned off (``WHITEN_MAX_WIDTH = 0``); both stop
at the same gradient tolerance in the same variables.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/solver_speed.py [--trunk static] [--rows 10000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import time
from typing import Any

import numpy as np
from _common import CACHE_DIR, SHARED, cpu_model, machine, write_json

from manyheads import Bundle, EmbeddingCache
from manyheads.heads import solver
from manyheads.heads.solver import fit_softmax

HEADS = ("lang", "section")


def rows(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rows of every language, whole source-package families, shuffled."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    with gzip.open(SHARED, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if row.get("section") and row.get("lang"):
                by_group.setdefault(row["group"], []).append(row)
    groups = sorted(by_group)
    random.Random(seed).shuffle(groups)
    out: list[dict[str, Any]] = []
    for g in groups:
        out.extend(by_group[g][:20])
        if len(out) >= n:
            break
    return out[:n]


def plain(on: bool) -> None:
    solver.WHITEN_MAX_WIDTH = 0 if on else WIDTH


WIDTH = solver.WHITEN_MAX_WIDTH


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trunk", default="static")
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    print(f"machine: {machine()}; CPU: {cpu_model()}; trunk {args.trunk}")
    data = rows(args.rows, args.seed)
    groups = sorted({r["group"] for r in data})
    test_groups = set(random.Random(args.seed).sample(groups, len(groups) // 5))
    train = [r for r in data if r["group"] not in test_groups]
    test = [r for r in data if r["group"] in test_groups]
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cache = EmbeddingCache(CACHE_DIR / f"solver-{args.trunk}.sqlite")
    bundle = Bundle(trunk=args.trunk, cache=cache)
    X_train = bundle.embed([r["text"] for r in train])
    X_test = bundle.embed([r["text"] for r in test])
    print(f"{len(train)} train / {len(test)} test rows, {X_train.shape[1]}-d vectors")
    result: dict[str, Any] = {"machine": machine(), "cpu": cpu_model(), "trunk": args.trunk}
    for head in HEADS:
        classes = sorted({r[head] for r in train})
        index = {c: i for i, c in enumerate(classes)}
        y = np.array([index[r[head]] for r in train])
        truth = [r[head] for r in test]
        print(f"\n{head} ({len(classes)} classes)")
        print(f"{'':22s} {'plain':>26s} {'whitened':>26s}")
        for C in (1.0, 16.0, 256.0, 4096.0):
            line = []
            for off in (True, False):
                plain(off)
                t = time.perf_counter()
                sol = fit_softmax(X_train, y, len(classes), C=C)
                seconds = time.perf_counter() - t
                pred = np.argmax(X_test @ sol.coef.T + sol.intercept, axis=1)
                acc = float(np.mean([classes[p] == t for p, t in zip(pred, truth, strict=True)]))
                line.append((sol.n_iter, seconds, acc))
                result[f"{head}/C={C:g}/{'plain' if off else 'whitened'}"] = {
                    "steps": sol.n_iter, "seconds": seconds, "accuracy": acc
                }  # fmt: skip
            print(
                f"solver, C={C:<6g}       "
                + " ".join(f"{n:5d} steps {s:6.2f} s {a:.3f}" for n, s, a in line)
                + f"   {line[0][1] / line[1][1]:.2f}x"
            )
        line = []
        for off in (True, False):
            plain(off)
            b = Bundle(trunk=args.trunk, cache=cache)
            t = time.perf_counter()
            b.fit_head(head, [r["text"] for r in train], [r[head] for r in train],
                       groups=[r["group"] for r in train], C="auto")  # fmt: skip
            seconds = time.perf_counter() - t
            answers = b.predict([r["text"] for r in test], use_cache=True)
            acc = float(
                np.mean([a[head]["label"] == t for a, t in zip(answers, truth, strict=True)])
            )
            C_ = float(b.heads[head].C_)
            line.append((C_, seconds, acc))
            result[f"{head}/fit_head/{'plain' if off else 'whitened'}"] = {
                "C": C_, "seconds": seconds, "accuracy": acc
            }  # fmt: skip
        print(
            "fit_head, C=auto      "
            + " ".join(f"C={c:<7g} {s:6.2f} s {a:.3f}" for c, s, a in line)
            + f"   {line[0][1] / line[1][1]:.2f}x"
        )
    plain(False)
    write_json(args.json, result)


if __name__ == "__main__":
    main()
