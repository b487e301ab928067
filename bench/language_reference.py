"""How hard is the `language` head's held-out data? The built-in `content` bundle next
to n-gram models and an off-the-shelf language identifier, per source and per
program, on the validation and the test split.

    .venv/bin/python scripts/build_content_bundle.py --rows bench/.cache/content_rows.jsonl.gz
    .venv/bin/python bench/language_reference.py [--json bench/results/language_reference.json]

Rows and split come from the build (``--rows``; grouped by program / package
family). Texts: real (not generated) ones of >= 20 characters that carry a
language, as in ``bench/content_eval.py`` (the bar: 95%). Systems:

- ``content`` at its full tier and its smallest;
- TF-IDF character 1-4-grams + LogisticRegression on a random 40,000 train rows
  (the baseline of ``content_eval.py``);
- TF-IDF character 1-4-grams, full vocabulary, + LinearSVC on every train row;
- Lingua (``lingua-language-detector``, n-gram models of 1-5 characters trained
  on its own corpora, built for short texts; high-accuracy mode;
  ``pip install -c constraints.txt -e ".[langref]"``), told to choose among the
  bundle's languages it knows. Languages it does not know are left out of
  every system's "shared" column so the figures compare on the same texts
  (and counted wrong for it in "all").

The split is by program: which programs land in a split moves accuracy a lot
(short UI strings of file-type names and keyboard layouts are mostly product
names), hence the per-program table.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from content_eval import read_rows  # noqa: E402


def language_rows(rows: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    return [
        r
        for r in rows
        if r["split"] == split and r["language"] and not r["generated"] and len(r["text"]) >= 20
    ]


def accuracy(rows: list[dict[str, Any]], pred: list[str], keep: Any = None) -> tuple[float, int]:
    pairs = [(r["language"], p) for r, p in zip(rows, pred, strict=True) if keep is None or keep(r)]
    if not pairs:
        return float("nan"), 0
    return sum(a == b for a, b in pairs) / len(pairs), len(pairs)


def ngram_models(train: list[dict[str, Any]], parts: dict[str, list[dict]]) -> dict[str, Any]:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    out: dict[str, Any] = {}
    texts, labels = [r["text"] for r in train], [r["language"] for r in train]
    t0 = time.perf_counter()
    vec = TfidfVectorizer(
        analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True, max_features=200_000
    )
    X = vec.fit_transform(texts)
    some = sorted(random.Random(0).sample(range(len(texts)), min(40_000, len(texts))))
    lr = LogisticRegression(C=10.0, max_iter=300).fit(X[some], [labels[i] for i in some])
    out["TF-IDF char 1-4 + LR (40k rows)"] = (
        {s: list(lr.predict(vec.transform([r["text"] for r in p]))) for s, p in parts.items()},
        time.perf_counter() - t0,
    )
    print(f"  TF-IDF + LR: {time.perf_counter() - t0:.0f} s", flush=True)
    t0 = time.perf_counter()
    full = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True)
    X = full.fit_transform(texts)
    svc = LinearSVC(C=0.5).fit(X, labels)
    out[f"TF-IDF char 1-4 (all {X.shape[1]:,}) + LinearSVC (all rows)"] = (
        {s: list(svc.predict(full.transform([r["text"] for r in p]))) for s, p in parts.items()},
        time.perf_counter() - t0,
    )
    print(f"  TF-IDF + LinearSVC: {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=Path, default=HERE / ".cache" / "content_rows.jsonl.gz")
    ap.add_argument("--bundle", default="content")
    ap.add_argument("--programs", type=int, default=12, help="programs shown per split")
    ap.add_argument("--json")
    args = ap.parse_args()
    from _common import machine, write_json

    from manyheads import Bundle

    rows = read_rows(args.rows)
    parts = {s: language_rows(rows, s) for s in ("val", "test")}
    train = [r for r in rows if r["split"] == "train" and r["language"] and not r["generated"]]
    print(f"machine: {machine()}")
    print({"train": len(train), **{s: len(p) for s, p in parts.items()}}, flush=True)

    systems: dict[str, tuple[dict[str, list[str]], float]] = {}
    main_bundle = Bundle.load(args.bundle, cache=None)
    labels = sorted(main_bundle.heads["language"].classes_)
    for tier in dict.fromkeys(
        [main_bundle.trunk.dim, min([main_bundle.trunk.dim, *main_bundle.tiers])]
    ):
        b = main_bundle if tier == main_bundle.trunk.dim else Bundle.load(args.bundle, tier=tier)
        t0 = time.perf_counter()
        pred = {
            s: [a["language"]["label"] for a in b.predict([r["text"] for r in p], "language")]
            for s, p in parts.items()
        }
        systems[f"content (tier {tier})"] = (pred, time.perf_counter() - t0)
    systems.update(ngram_models(train, parts))

    try:
        from lingua import Language, LanguageDetectorBuilder
    except ImportError:
        sys.exit(
            "language_reference: Lingua is missing; install it with\n"
            '  .venv/bin/pip install -c constraints.txt -e ".[langref]"'
        )
    from importlib.metadata import version

    every = {lang.iso_code_639_1.name.lower(): lang for lang in Language.all()}
    known = [lang for lang in labels if lang in every]
    unknown = sorted(set(labels) - set(known))
    detector = LanguageDetectorBuilder.from_languages(*(every[k] for k in known)).build()
    t0 = time.perf_counter()
    pred = {
        s: [
            found.iso_code_639_1.name.lower() if found is not None else "?"
            for found in detector.detect_languages_in_parallel_of([r["text"] for r in p])
        ]
        for s, p in parts.items()
    }
    lingua = f"Lingua {version('lingua-language-detector')} (the {len(known)} languages it knows)"
    systems[lingua] = (pred, time.perf_counter() - t0)

    def shared(r: dict[str, Any]) -> bool:
        return r["language"] not in unknown

    results: dict[str, Any] = {
        "machine": machine(),
        "n": {s: len(p) for s, p in parts.items()},
        "languages": labels,
        "left_out_of_shared": unknown,
        "systems": {},
    }
    cols = [
        ("all", None),
        ("shared", shared),
        ("gettext", lambda r: r["source"] == "gettext"),
        ("debdesc", lambda r: r["source"] == "debdesc"),
    ]
    for split, part in parts.items():
        print(
            f"\n{split} split: {len(part)} texts of >= 20 characters; 'shared' leaves out {unknown}"
        )
        print(f"{'system':62s} " + " ".join(f"{c:>8s}" for c, _ in cols))
        for name, (pred, seconds) in systems.items():
            got = {c: accuracy(part, pred[split], keep) for c, keep in cols}
            entry = results["systems"].setdefault(name, {"seconds": seconds})
            entry[split] = {c: {"accuracy": a, "n": n} for c, (a, n) in got.items()}
            print(f"{name:62s} " + " ".join(f"{got[c][0]:8.3f}" for c, _ in cols))
        programs = collections.Counter(r["group"] for r in part).most_common(args.programs)
        names = list(systems)
        print(f"\n{split}: accuracy by program (most texts first)")
        print(
            f"{'program':34s} {'texts':>6s} " + " ".join(f"{i + 1:>6d}" for i in range(len(names)))
        )
        per: dict[str, Any] = {}
        for group, n in programs:
            accs = [
                accuracy(part, systems[s][0][split], lambda r, g=group: r["group"] == g)[0]
                for s in names
            ]
            per[group] = {"n": n, **dict(zip(names, accs, strict=True))}
            print(f"{group:34s} {n:6d} " + " ".join(f"{a:6.3f}" for a in accs))
        print("  columns: " + "; ".join(f"{i + 1} = {s}" for i, s in enumerate(names)))
        results[f"{split}_by_program"] = per
    write_json(args.json, results)


if __name__ == "__main__":
    main()
