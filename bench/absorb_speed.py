"""Where the absorbed bundle's speed goes: the four teachers one after another vs the
bundle ``bench/absorb.py`` saved, side by side in one run, on the gold-labelled texts
split by length: texts that fit the teachers' 128-token window (both read all of them)
and longer ones (the teachers read their first 128 tokens; the bundle reads the whole
text, in windows of MiniLM's 256 tokens, averaged).

    python -u bench/absorb_speed.py [--texts 400]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from absorb import WORK, cpu_name
from absorb_teachers import OUT as TEACHERS
from absorb_teachers import TASKS

from manyheads import Bundle
from manyheads.absorb import load_teacher


def rate(run, n: int) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    run()
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=int, default=400, help="texts of each length group")
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}")
    lines = (WORK / "gold.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines]
    teachers = [load_teacher(name, str(TEACHERS / name)) for name in TASKS]
    bundle = Bundle.load(WORK / "bundle", cache=None)
    tokenizer = bundle.trunk.parts[0].tokenizer
    counts = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    groups = {
        "fit in 128 tokens": [t for t, c in zip(texts, counts, strict=True) if c <= 128],
        "longer than 128 tokens": [t for t, c in zip(texts, counts, strict=True) if c > 128],
    }
    for t in teachers:  # models loaded before any clock starts
        t.answer(texts[:8])
    bundle.predict(texts[:8])
    results = {}
    for name, group in groups.items():
        group = group[: args.texts]
        teach = rate(lambda g=group: [t.answer(g) for t in teachers], len(group))
        mine = rate(lambda g=group: bundle.predict(g), len(group))
        results[name] = {"texts": len(group), "teachers": teach, "bundle": mine}
        print(
            f"{name:24} {len(group):4} texts: teachers one after another {teach:6.1f} texts/s, "
            f"bundle {mine:6.1f} texts/s: {mine / teach:.2f}x"
        )
    out = Path(__file__).resolve().parent / "results" / "absorb_speed.json"
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
