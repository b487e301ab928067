"""Four real teachers absorbed into one bundle, side by side with the teachers.

The teachers (``bench/absorb_teachers.py``, run first): all-MiniLM-L6-v2 fine-tuned as
Hugging Face sequence-classification models on Debian ``section``, Debian ``lang``, code
``lang`` (head ``code``) and Debian ``role`` (multilabel), saved with ``save_pretrained``.
Here, in one run:

1. ``manyheads absorb`` (the job under it) absorbs the four into one bundle
   (``minilm+tfidf``) from ``--unlabelled`` texts of groups no teacher learnt from
   (Debian descriptions in every language and code, 3:1), with gold-labelled test rows
   of other groups as ``--eval``: accuracy / macro-F1 of each head and its teacher,
   agreement on held-out texts, size on disk, texts/s of the four teachers one after
   another vs the bundle on the same held-out texts.
   The same at temperatures 1 and 4 (the default is 2), from the cached answers.
2. The same with ``--finetune`` (the bundle's MiniLM fine-tuned on every teacher's
   answers at once), from the first ``--finetune-texts`` of those texts.
3. Each teacher's answers written to a JSONL file and absorbed from the file alone (no
   teacher model): agreement with those answers on held-out texts.

    python -u bench/absorb.py [--unlabelled 20000] [--test 600] [--finetune-texts 6000]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT
from absorb_teachers import OUT as TEACHERS
from absorb_teachers import TASKS, read_groups, task_rows

from manyheads import jobs
from manyheads.absorb import load_teacher
from manyheads.cache import EmbeddingCache

WORK = ROOT / "bench" / ".cache" / "absorb"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def build_files(n_unlabelled: int, n_test: int, seed: int) -> tuple[Path, Path]:
    """The unlabelled texts (absorb groups) and the gold-labelled rows (test groups)."""
    groups = json.loads((TEACHERS / "groups.json").read_text())
    deb, code = read_groups("debdesc"), read_groups("code")
    rng = random.Random(seed)
    deb_rows = [r for g in groups["debdesc"]["absorb"] for r in deb[g]]
    code_rows = [r for g in groups["code"]["absorb"] for r in code[g]]
    rng.shuffle(deb_rows)
    rng.shuffle(code_rows)
    n_code = min(len(code_rows), n_unlabelled // 4)
    mixed = deb_rows[: n_unlabelled - n_code] + code_rows[:n_code]
    rng.shuffle(mixed)
    data = write_jsonl(
        WORK / "texts.jsonl", [{"text": r["text"], "group": r["group"]} for r in mixed]
    )
    test_groups_deb = groups["debdesc"]["test"]
    english = task_rows("section", deb, test_groups_deb)
    others = [r for r in task_rows("lang", deb, test_groups_deb) if r["lang"] != "en"]
    code_test = task_rows("code", code, groups["code"]["test"])
    gold_rng = random.Random(seed + 1)  # the same gold rows whatever --unlabelled is
    for rows in (english, others, code_test):
        gold_rng.shuffle(rows)
    gold = [
        {"text": r["text"], "section": r["section"], "role": r.get("role") or [], "lang": "en"}
        for r in english[:n_test]
    ]
    gold += [{"text": r["text"], "lang": r["lang"]} for r in others[:n_test]]
    gold += [{"text": r["text"], "code": r["lang"]} for r in code_test[:n_test]]
    return data, write_jsonl(WORK / "gold.jsonl", gold)


def show(title: str, report: Any) -> dict[str, Any]:
    print(f"\n== {title} ({report.seconds:.0f} s) ==")
    print(
        f"{'head':8} {'kind':10} {'agree':>6} {'stud_acc':>8} {'teach_acc':>9} {'diff':>6} "
        f"{'stud_F1':>7} {'teach_F1':>8}"
    )
    heads = {}
    for h in report.heads:
        s, t = h.student or {}, h.teacher or {}
        diff = (s["accuracy"] - t["accuracy"]) * 100 if s and t else float("nan")
        print(
            f"{h.name:8} {h.kind:10} {h.agreement:6.4f} {s.get('accuracy', float('nan')):8.4f} "
            f"{t.get('accuracy', float('nan')):9.4f} {diff:+6.2f} "
            f"{s.get('macro_f1', float('nan')):7.4f} {t.get('macro_f1', float('nan')):8.4f}"
        )
        heads[h.name] = {"agreement": h.agreement, "student": h.student, "teacher": h.teacher}
    out: dict[str, Any] = {"heads": heads, "split": report.split, "seconds": report.seconds}
    if report.teachers_bytes:
        ratio = report.teachers_bytes / report.bundle_bytes
        print(
            f"on disk: teachers {report.teachers_bytes / 1e6:.1f} MB, bundle "
            f"{report.bundle_bytes / 1e6:.1f} MB: {ratio:.2f}x smaller (bar 3.5x)"
        )
        out["size_ratio"] = ratio
        out["teachers_bytes"], out["bundle_bytes"] = report.teachers_bytes, report.bundle_bytes
    if report.speed:
        sp = report.speed
        print(
            f"labelling {int(sp['texts'])} held-out texts: four teachers one after another "
            f"{sp['teachers_texts_per_s']:.1f} texts/s, bundle {sp['bundle_texts_per_s']:.1f} "
            f"texts/s: {sp['speedup']:.2f}x (bar 3.5x)"
        )
        out["speed"] = sp
    if report.finetune is not None:
        out["finetune_seconds"] = report.finetune.seconds
        print(f"fine-tuning: {report.finetune.seconds:.0f} s, {report.finetune.steps} steps")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--unlabelled", type=int, default=20000)
    parser.add_argument("--test", type=int, default=600, help="gold rows per corpus part")
    parser.add_argument("--finetune-texts", type=int, default=6000)
    parser.add_argument("--speed-texts", type=int, default=500)
    parser.add_argument(
        "--skip", default="", help="comma-separated: plain,temperature,finetune,answers"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--truncate", type=int, default=None,
        help="the bundle's MiniLM reads a text's first TOKENS tokens, as the teachers do",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "absorb.json")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    WORK.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {cpu_name()}")
    data, gold = build_files(args.unlabelled, args.test, args.seed)
    teachers = [f"{name}={TEACHERS / name}" for name in TASKS]
    cache_dir = WORK / "cache"
    results: dict[str, Any] = {"cpu": cpu_name(), "unlabelled": args.unlabelled}
    common = {"eval_file": gold, "group_field": "group", "cache_dir": cache_dir, "seed": 0}
    if args.truncate is not None:  # a bad count is the library's one-line error
        common["truncate"] = args.truncate
        results["truncate"] = args.truncate

    if "plain" not in skip:
        folder = WORK / "bundle"
        shutil.rmtree(folder, ignore_errors=True)
        report = jobs.absorb_file(
            data, folder, teachers, trunk="minilm+tfidf", speed_texts=args.speed_texts,
            progress=True, **common,
        )  # fmt: skip
        results["plain"] = show("absorbed, minilm+tfidf, frozen", report)

    if "temperature" not in skip:  # the same, learning from unsoftened answers
        for temperature in (1.0, 4.0):
            folder = WORK / f"bundle-t{temperature:g}"
            shutil.rmtree(folder, ignore_errors=True)
            report = jobs.absorb_file(
                data, folder, teachers, trunk="minilm+tfidf", temperature=temperature,
                speed_texts=0, **common,
            )  # fmt: skip
            results[f"temperature_{temperature:g}"] = show(
                f"absorbed at temperature {temperature:g}", report
            )

    if "finetune" not in skip:
        rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
        small = write_jsonl(WORK / "texts-finetune.jsonl", rows[: args.finetune_texts])
        folder = WORK / "bundle-ft"
        shutil.rmtree(folder, ignore_errors=True)
        report = jobs.absorb_file(
            small, folder, teachers, trunk="minilm+tfidf", finetune=True, epochs=1,
            speed_texts=args.speed_texts, progress=True, **common,
        )  # fmt: skip
        results["finetune"] = show(
            f"absorbed with --finetune ({args.finetune_texts} texts)", report
        )

    if "answers" not in skip:
        lines = data.read_text(encoding="utf-8").splitlines()
        texts = [json.loads(line)["text"] for line in lines]
        cache = EmbeddingCache(cache_dir / "embeddings.sqlite")
        answer_files = []
        for name in TASKS:
            teacher = load_teacher(name, str(TEACHERS / name))
            probs = teacher.answer(texts, cache=cache).probs  # cached: no model runs
            rows = [
                {
                    "text": t,
                    "scores": {
                        lab: round(float(p), 6) for lab, p in zip(teacher.labels, row, strict=True)
                    },
                }
                for t, row in zip(texts, probs, strict=True)
            ]
            answer_files.append(f"{name}={write_jsonl(WORK / f'answers-{name}.jsonl', rows)}")
        folder = WORK / "bundle-answers"
        shutil.rmtree(folder, ignore_errors=True)
        started = time.perf_counter()
        report = jobs.absorb_file(
            data, folder, answer_files, trunk="minilm+tfidf", speed_texts=0, progress=True,
            **common,
        )  # fmt: skip
        results["answers"] = show("absorbed from JSONL answers alone (no teacher model)", report)
        results["answers"]["wall"] = time.perf_counter() - started
        print(
            "bar: agreement >= 0.95 on held-out texts:",
            {h.name: round(h.agreement, 4) for h in report.heads},
        )

    args.json.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
