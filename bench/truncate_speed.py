"""What ``--truncate`` buys an absorbed bundle, and what it costs: speed against four
teachers one after another, side by side in one run, and the accuracy of a head on
long texts.

    HF_HUB_OFFLINE=1 .venv/bin/python -u bench/truncate_speed.py [--texts 400] \\
        [--teacher-rows 200] [--quality-rows 2000] [--json bench/results/truncate_speed.json]

**Speed.** Four MiniLM sequence classifiers, built as ``bench/absorb_teachers.py``
builds the teachers of ``bench/absorb.py`` (the same model, task labels and 128-token
window), but fine-tuned for one epoch on ``--teacher-rows`` rows each: their speed is
that of any fine-tuned MiniLM classifier, and their answers are not used
(``--real-teachers``: the real teachers themselves, once made). Beside them,
a ``minilm+tfidf`` bundle with the four tasks' heads (as ``absorb`` makes it), once as
it reads long texts by default (whole, in MiniLM's 256-token windows averaged) and once
with ``truncating(..., 128)`` (the first 128 tokens, as the teachers read them). The
texts: ``--texts`` held-out rows, Debian descriptions in every language and code
snippets 3:1 (the mix of ``bench/absorb.py``'s texts), split at 128 MiniLM tokens.
Each arm: texts/s, the best of 3 passes, after a warm-up.

**Quality.** A ``section`` head (English Debian descriptions, ``--quality-rows``
training rows from other source families, ``fit_head``'s defaults) on each trunk, its
accuracy on ``--quality-test`` held-out English rows, and on those of them longer than
128 tokens alone.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import absorb_teachers as made
from _common import CACHE_DIR, best_of, cpu_model, machine, write_json

from manyheads import Bundle
from manyheads.absorb import load_teacher
from manyheads.trunks import truncating

WINDOW = made.MAX_LENGTH  # the teachers' window: 128 tokens
TEACHERS = CACHE_DIR / "truncate-teachers"


def teachers(rows_each: int, seed: int, splits: dict[str, Any], real: bool) -> list[Any]:
    """The four teachers: ``real``, those of ``bench/absorb_teachers.py`` (run it first);
    else stand-ins (fine-tuned once, then read from the cache)."""
    if real:
        return [load_teacher(name, str(made.OUT / name)) for name in made.TASKS]
    made.OUT = TEACHERS
    TEACHERS.mkdir(parents=True, exist_ok=True)
    for name, (corpus, _, _) in made.TASKS.items():
        if not (TEACHERS / name / "config.json").is_file():
            rows = made.task_rows(name, made.read_groups(corpus), splits[corpus]["teacher"])
            random.Random(seed).shuffle(rows)
            print(name, made.train_teacher(name, rows[:rows_each], 1, seed), flush=True)
    return [load_teacher(name, str(TEACHERS / name)) for name in made.TASKS]


def head_rows(splits: dict[str, Any], part: str, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Each task's rows from the ``part`` groups of its corpus, shuffled."""
    out = {}
    for name, (corpus, _, _) in made.TASKS.items():
        rows = made.task_rows(name, made.read_groups(corpus), splits[corpus][part])
        random.Random(seed).shuffle(rows)
        out[name] = rows
    return out


def fit_heads(bundle: Bundle, rows: dict[str, list[dict[str, Any]]], n: int) -> Bundle:
    for name, (_, field, kind) in made.TASKS.items():
        part = [r for r in rows[name] if r.get(field) is not None][:n]
        labels = (
            [r[field] or [] for r in part] if kind == "multilabel" else [r[field] for r in part]
        )
        bundle.fit_head(name, [r["text"] for r in part], labels, kind)
    return bundle


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--texts", type=int, default=400, help="held-out texts timed")
    ap.add_argument("--teacher-rows", type=int, default=200)
    ap.add_argument("--head-rows", type=int, default=300, help="rows of each speed head")
    ap.add_argument(
        "--quality-rows", type=int, default=2000, help="section head's rows (0: no quality part)"
    )
    ap.add_argument("--quality-test", type=int, default=1500, help="section head's test rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument(
        "--real-teachers", action="store_true",
        help="time bench/absorb.py's teachers (bench/absorb_teachers.py) instead of stand-ins",
    )  # fmt: skip
    args = ap.parse_args()
    print(f"machine: {machine()}; CPU: {cpu_model()}", flush=True)
    t0 = time.perf_counter()
    splits = made.split_groups(args.seed)
    teach = teachers(args.teacher_rows, args.seed, splits, args.real_teachers)
    train, test = head_rows(splits, "absorb", args.seed), head_rows(splits, "test", args.seed)
    # held-out texts: Debian descriptions in every language and code, 3:1
    n_code = args.texts // 4
    texts = [r["text"] for r in test["lang"][: args.texts - n_code]]
    texts += [r["text"] for r in test["code"][:n_code]]
    whole = fit_heads(Bundle(trunk="minilm+tfidf", cache=None), train, args.head_rows)
    cut = fit_heads(
        Bundle(trunk=truncating("minilm+tfidf", WINDOW), cache=None), train, args.head_rows
    )
    tokenizer = whole.trunk.parts[0].tokenizer
    counts = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    groups = {
        "all": texts,
        f"within {WINDOW} tokens": [t for t, c in zip(texts, counts, strict=True) if c <= WINDOW],
        f"longer than {WINDOW} tokens": [
            t for t, c in zip(texts, counts, strict=True) if c > WINDOW
        ],
    }
    for t in teach:  # models loaded before any clock starts
        t.answer(texts[:8])
    whole.predict(texts[:8])
    cut.predict(texts[:8])
    speed: dict[str, Any] = {}
    for name, group in groups.items():
        rate = {
            "teachers": len(group) / best_of(lambda g=group: [t.answer(g) for t in teach]),
            "bundle": len(group) / best_of(lambda g=group: whole.predict(g)),
            "bundle, --truncate 128": len(group) / best_of(lambda g=group: cut.predict(g)),
        }
        speed[name] = {"texts": len(group), **rate}
        print(
            f"{name:24} {len(group):4} texts: teachers {rate['teachers']:6.1f} texts/s, bundle "
            f"{rate['bundle']:6.1f} ({rate['bundle'] / rate['teachers']:.2f}x), truncating "
            f"{rate['bundle, --truncate 128']:6.1f} "
            f"({rate['bundle, --truncate 128'] / rate['teachers']:.2f}x)",
            flush=True,
        )
    # quality: a section head on each trunk, English Debian rows
    quality: dict[str, Any] = {}
    rows = train["section"][: args.quality_rows]
    held = test["section"][: args.quality_test]
    arms = (("windows", "minilm+tfidf"), (f"truncate {WINDOW}", None)) if rows else ()
    if arms:  # the held-out rows' lengths, only when there is a quality part
        held_counts = [len(e.ids) for e in tokenizer.encode_batch([r["text"] for r in held])]
        is_long = [c > WINDOW for c in held_counts]
    for arm, trunk in arms:
        bundle = Bundle(trunk=trunk or truncating("minilm+tfidf", WINDOW), cache=None)
        bundle.fit_head("section", [r["text"] for r in rows], [r["section"] for r in rows])
        answers = bundle.predict([r["text"] for r in held])
        hits = [a["section"]["label"] == r["section"] for a, r in zip(answers, held, strict=True)]
        long_hits = [h for h, long in zip(hits, is_long, strict=True) if long]
        quality[arm] = {
            "all": {"rows": len(hits), "accuracy": sum(hits) / len(hits)},
            f"longer than {WINDOW} tokens": {
                "rows": len(long_hits),
                "accuracy": sum(long_hits) / max(len(long_hits), 1),
            },
        }
        print(f"section, {arm}: {quality[arm]}", flush=True)
    result = {
        "machine": machine(),
        "cpu": cpu_model(),
        "settings": vars(args),
        "speed": speed,
        "quality": quality,
        "seconds": time.perf_counter() - t0,
    }
    print(f"whole run: {result['seconds']:.0f} s")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
