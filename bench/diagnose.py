"""Does ``manyheads diagnose`` rank trunks as trained heads do?

Four tasks: Debian package descriptions in all 30 languages — ``section`` (multiclass),
``lang`` (multiclass), ``role`` (multilabel) — and source-code snippets, ``lang``
(multiclass); the trunks ``minilm``, ``hashing``, ``static`` and ``minilm+tfidf``.
Each corpus gets a grouped 80/20 split (the rows of bench/quality.py: no source
package family or source file on both sides).

Side by side, per task:

- diagnose's ranking: ``diagnose_trunks`` on a sample of the train rows (1,500 by
  default; grouped, as ``manyheads diagnose --group-field group`` does), ranked by the
  linear probe, then kNN accuracy, then the discordance (the rule of
  ``manyheads.evaluate.diagnosis.RANK_BY``, fixed before this benchmark ran);
- the trained ranking: a head per trunk trained on all the train rows with the
  ``manyheads train`` defaults (``Bundle.fit_head``: linear, C="auto", thresholds for
  accuracy, part weights "auto"), scored on the test rows (accuracy; exact match for
  ``role``), the better accuracy first.

Two rankings *agree* when their orders of the four trunks are identical. Kendall's
tau (tau-b, over the 6 pairs of trunks) is printed too, and whether the best trunk is
the same; as supporting figures, the tau of the order each single score (kNN accuracy,
discordance) would give. The bar: agreement on at least 3 of the 4 tasks.

    .venv/bin/python -u bench/diagnose.py [--rows 4000] [--code-rows 3000] [--sample 1500]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import time
from typing import Any

from _common import CACHE_DIR, corpus_rows, grouped_split, machine, write_json
from scipy.stats import kendalltau

from manyheads import Bundle, EmbeddingCache
from manyheads.absorb.diagnose import diagnose_trunks
from manyheads.evaluate.diagnosis import RANK_BY

TASKS = [  # (corpus, field, kind)
    ("debdesc", "section", "multiclass"),
    ("debdesc", "lang", "multiclass"),
    ("debdesc", "role", "multilabel"),
    ("code", "lang", "multiclass"),
]
TRUNKS = ("minilm", "hashing", "static", "minilm+tfidf")


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def labels_of(rows: list[dict[str, Any]], field: str, kind: str) -> list[Any]:
    return [list(r[field] or []) if kind == "multilabel" else r[field] for r in rows]


def tau(order: list[str], reference: list[str]) -> float:
    """Kendall's tau-b of two orders of the same trunks."""
    value = kendalltau([order.index(t) for t in TRUNKS], [reference.index(t) for t in TRUNKS])
    return float(value.statistic)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=4000, help="Debian rows (all languages)")
    ap.add_argument("--code-rows", type=int, default=3000)
    ap.add_argument("--sample", type=int, default=1500, help="train rows diagnose reads")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    print(f"machine: {machine()}; CPU: {cpu_model()}")
    cache = EmbeddingCache(CACHE_DIR / "embeddings.sqlite")
    corpora = {
        "debdesc": corpus_rows("debdesc", args.rows),
        "code": corpus_rows("code", args.code_rows),
    }
    splits = {name: grouped_split(rows) for name, rows in corpora.items()}
    results: dict[str, Any] = {"trunks": list(TRUNKS), "sample": args.sample, "tasks": {}}
    diagnoses = {}
    trained: dict[str, dict[str, float]] = {}
    for corpus, (train, test) in splits.items():
        tasks = {f: (k, labels_of(train, f, k)) for c, f, k in TASKS if c == corpus}
        start = time.perf_counter()
        diagnoses[corpus] = diagnose_trunks(
            [r["text"] for r in train], tasks, list(TRUNKS),
            groups=[r["group"] for r in train], sample=args.sample, cache=cache, progress=True,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        print(f"{corpus}: diagnosed {len(TRUNKS)} trunks on {diagnoses[corpus].n} train rows "
              f"in {seconds:.0f} s (encoding: "
              + ", ".join(f"{t} {s:.0f} s" for t, s in diagnoses[corpus].seconds.items())
              + ")")  # fmt: skip
        results[f"{corpus}_diagnose_seconds"] = seconds
        for trunk in TRUNKS:
            bundle = Bundle(trunk=trunk, cache=cache)
            start = time.perf_counter()
            for field, (kind, labels) in tasks.items():
                bundle.fit_head(
                    field, [r["text"] for r in train], labels, kind=kind,
                    groups=[r["group"] for r in train], C="auto", thresholds="accuracy",
                    part_weights="auto",
                )  # fmt: skip
            y_te = {f: labels_of(test, f, k) for f, (k, _) in tasks.items()}
            metrics = bundle.evaluate([r["text"] for r in test], y_te)
            for field in tasks:
                trained.setdefault(f"{corpus}/{field}", {})[trunk] = metrics[field]["accuracy"]
            print(f"{corpus}: trained {len(tasks)} heads on {trunk} ({len(train)} train / "
                  f"{len(test)} test rows) in {time.perf_counter() - start:.0f} s")  # fmt: skip

    agree = 0
    for corpus, field, kind in TASKS:
        task = f"{corpus}/{field}"
        diagnosis = diagnoses[corpus].tasks[field]
        head_acc = trained[task]
        order = diagnosis.ranking
        reference = sorted(TRUNKS, key=lambda t: (-head_acc[t], TRUNKS.index(t)))
        by_score = {
            key: sorted(TRUNKS, key=lambda t, k=key: -next(
                getattr(s, k) for s in diagnosis.scores if s.trunk == t))
            for key in ("knn", "discordance")
        }  # fmt: skip
        same = order == reference
        agree += same
        train, test = splits[corpus]
        what = "label sets" if kind == "multilabel" else "labels"
        print(f"\n{task} ({kind}, {diagnosis.labels} {what} in the sample; diagnose on "
              f"{diagnoses[corpus].n} train rows, heads on {len(train)} train / {len(test)} "
              "test rows)")  # fmt: skip
        print(f"{'trunk':<14}{'probe':>8}{'knn':>8}{'discord':>9}{'head acc':>10}")
        for s in diagnosis.scores:
            print(f"{s.trunk:<14}{s.probe:>8.4f}{s.knn:>8.4f}{s.discordance:>9.4f}"
                  f"{head_acc[s.trunk]:>10.4f}")  # fmt: skip
        print(f"diagnose ranking: {' > '.join(order)}")
        print(f"trained ranking:  {' > '.join(reference)}")
        print(f"Kendall tau {tau(order, reference):+.2f}; identical order: "
              f"{'yes' if same else 'no'}; same best trunk: "
              f"{'yes' if order[0] == reference[0] else 'no'}; tau of kNN alone "
              f"{tau(by_score['knn'], reference):+.2f}, of the discordance alone "
              f"{tau(by_score['discordance'], reference):+.2f}")  # fmt: skip
        results["tasks"][task] = {
            "diagnosis": [vars(s) for s in diagnosis.scores],
            "head_accuracy": head_acc,
            "diagnose_ranking": order,
            "trained_ranking": reference,
            "tau": tau(order, reference),
            "agree": same,
            "tau_knn": tau(by_score["knn"], reference),
            "tau_discordance": tau(by_score["discordance"], reference),
        }
    results["agreeing_tasks"] = agree
    print(f"\nranked by {', then '.join(RANK_BY)}: the rankings agree (identical order) on "
          f"{agree} of {len(TASKS)} tasks (bar: 3 of 4): "
          f"{'met' if agree >= 3 else 'not met'}")  # fmt: skip
    write_json(args.json, results)


if __name__ == "__main__":
    main()
