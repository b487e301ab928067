"""Is each head's drift alarm quiet on a stationary stream and quick after a shift?

    .venv/bin/python bench/drift_check.py [--train 10000] [--stream 20000] [--trunk hashing]

Real Debian descriptions (../shared/data/debdesc.jsonl.gz, 30 languages), split by
group: a bundle with a ``lang`` and a ``section`` head is trained on half the groups,
without the rows of a few languages (``ja``, ``ko``, ``zh_CN``) and sections
(``golang``, ``rust``) it is never shown. The other groups make the streams, read
through a rolling :class:`~manyheads.learn.drift.DriftWindow` of 1,000 answers:

- stationary: ``--stream`` rows like the training rows (shuffled; then the same rows
  with each package family's rows together), the window judged every 50 rows: the
  largest PSI seen per head and whether any alarm came;
- shifts: 5,000 stationary rows, then rows of the unseen languages (or sections),
  the window judged every 10 rows: the rows after the shift until each head's first
  alarm (the bar: within 2,000 for the heads whose inputs shifted).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import time
from pathlib import Path
from typing import Any

from manyheads import Bundle
from manyheads.learn.drift import DriftSettings, DriftWindow

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "debdesc.jsonl.gz"
UNSEEN_LANGS = {"ja", "ko", "zh_CN"}
UNSEEN_SECTIONS = {"golang", "rust"}


def _rows(path: Path, keep: float, seed: int) -> list[dict[str, Any]]:
    """A random share ``keep`` of the groups, every row of each."""
    rng = random.Random(seed)
    chosen: dict[str, bool] = {}
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            group = row["group"]
            if group not in chosen:
                chosen[group] = rng.random() < keep
            if chosen[group] and row.get("section"):
                rows.append({k: row[k] for k in ("text", "lang", "section", "group")})
    return rows


def _stream(
    bundle: Bundle, answers: list[dict[str, Any]], every: int, start: int = 0
) -> tuple[dict[str, dict[str, float]], dict[str, int | None]]:
    """Feed ``answers`` to a window, judging it every ``every`` rows: per head the largest
    PSI of labels and of confidence seen in a full window (and the largest share of
    its alarm threshold) and the rows after ``start`` until the first alarm."""
    window = DriftWindow(DriftSettings(window=1000))
    window.follow(bundle.head_info)
    top = {h: {"psi": 0.0, "js": 0.0, "confidence_psi": 0.0, "of_threshold": 0.0}
           for h in bundle.head_info}  # fmt: skip
    first: dict[str, int | None] = dict.fromkeys(bundle.head_info, None)
    for i in range(0, len(answers), every):
        window.observe(answers[i : i + every])
        seen = i + every
        for head, row in window.report(bundle.head_info).items():
            if row["alarm"] and first[head] is None:
                first[head] = seen - start
            if row["window"] < 1000:
                continue
            most = top[head]
            for key in ("psi", "js", "confidence_psi"):
                most[key] = max(most[key], row[key] or 0.0)
            share = max(row["psi"] / row["psi_threshold"],
                        (row["confidence_psi"] or 0) / row["confidence_threshold"])  # fmt: skip
            most["of_threshold"] = round(max(most["of_threshold"], share), 3)
    return top, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--train", type=int, default=10_000)
    parser.add_argument("--stream", type=int, default=20_000)
    parser.add_argument("--trunk", default="hashing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    t0 = time.perf_counter()
    rows = _rows(args.data, 0.4, args.seed)
    rng = random.Random(args.seed)
    groups = sorted({r["group"] for r in rows})
    rng.shuffle(groups)
    train_groups = set(groups[: len(groups) // 2])

    def usual(r: dict[str, Any]) -> bool:
        return r["lang"] not in UNSEEN_LANGS and r["section"] not in UNSEEN_SECTIONS

    train = [r for r in rows if r["group"] in train_groups and usual(r)]
    rest = [r for r in rows if r["group"] not in train_groups]
    rng.shuffle(train)
    rng.shuffle(rest)
    train = train[: args.train]
    stationary = [r for r in rest if usual(r)]
    stream = stationary[: args.stream]
    lang_shift = [r for r in rest if r["lang"] in UNSEEN_LANGS][:2000]
    section_shift = [r for r in rest if r["section"] in UNSEEN_SECTIONS][:2000]
    print(f"rows read: {len(rows)} in {time.perf_counter() - t0:.0f} s")

    bundle = Bundle(trunk=args.trunk, cache=None)
    texts, groups_ = [r["text"] for r in train], [r["group"] for r in train]
    t0 = time.perf_counter()
    for head in ("lang", "section"):
        bundle.fit_head(head, texts, [r[head] for r in train], groups=groups_)
    print(f"trained {len(train)} rows in {time.perf_counter() - t0:.0f} s")

    def answer(part: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return bundle.predict([r["text"] for r in part], scores="top")

    base = answer(stream)
    report: dict[str, Any] = {"train": len(train), "trunk": args.trunk}
    for head, info in bundle.head_info.items():
        report[f"reference_n_{head}"] = info["reference"]["n"]
    top, first = _stream(bundle, base, 50)
    report["stationary"] = {"rows": len(base), "largest": top, "first_alarm": first}
    # the same rows as a stream in which each package family's rows come together
    by_group: dict[str, list[int]] = {}
    for i, r in enumerate(stream):
        by_group.setdefault(r["group"], []).append(i)
    order = [i for g in sorted(by_group, key=lambda g: rng.random()) for i in by_group[g]]
    top, first = _stream(bundle, [base[i] for i in order], 50)
    report["stationary, by family"] = {"rows": len(base), "largest": top, "first_alarm": first}
    lead = base[:5000]
    for name, part in (("unseen languages", lang_shift), ("unseen sections", section_shift)):
        _, first = _stream(bundle, lead + answer(part), 10, start=len(lead))
        report[name] = {"rows": len(part), "rows_to_alarm": first}
    print(json.dumps(report, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
