"""What a linear model reaches on hashed byte n-grams, by bucket count and n-gram length,
next to character n-grams: the ceiling a byte trunk's bag of n-grams could reach.

    .venv/bin/python scripts/build_content_bundle.py --rows bench/.cache/content_rows.jsonl.gz
    .venv/bin/python bench/bag_features.py [--json FILE]

For each task (code_language on code rows only, language on real texts of
>= 20 characters): a random 60,000 train rows and 15,000 test rows of the
content data's grouped split; features are hashed byte 1- to n-grams of the
first 1,024 UTF-8 bytes (`HashingVectorizer` over the bytes read as Latin-1,
one character per byte), weighed by sublinear TF-IDF, and a LinearSVC (C=0.5)
per task; beside it, TF-IDF over character 1-4-grams (300,000 features at
most). A few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

FEATURES = {  # name: (n-gram length, buckets; 0 = character n-grams, not hashed)
    "byte 1-4, 8,192 buckets": (4, 8192),
    "byte 1-4, 16,384 buckets": (4, 16384),
    "byte 1-4, 32,768 buckets": (4, 32768),
    "byte 1-6, 65,536 buckets": (6, 65536),
    "character 1-4, TF-IDF vocabulary": (4, 0),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, default=HERE / ".cache" / "content_rows.jsonl.gz")
    ap.add_argument("--json")
    args = ap.parse_args()
    from _common import machine, write_json
    from sklearn.feature_extraction.text import (
        HashingVectorizer,
        TfidfTransformer,
        TfidfVectorizer,
    )
    from sklearn.metrics import accuracy_score
    from sklearn.svm import LinearSVC

    with gzip.open(args.data, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]

    def as_latin1(text: str) -> str:  # one character per UTF-8 byte
        return text.encode("utf-8")[:1024].decode("latin-1")

    results: dict = {"machine": machine(), "tasks": {}}
    print(f"machine: {machine()}")
    for task in ("code_language", "language"):
        keep = [
            r
            for r in rows
            if r[task] is not None
            and (task != "code_language" or r[task] != "none")
            and (task != "language" or not r["generated"])
        ]
        rng = random.Random(0)
        train = [r for r in keep if r["split"] == "train"]
        test = [
            r for r in keep if r["split"] == "test" and (task != "language" or len(r["text"]) >= 20)
        ]
        rng.shuffle(train)
        rng.shuffle(test)
        train, test = train[:60_000], test[:15_000]
        results["tasks"][task] = {}
        for name, (longest, buckets) in FEATURES.items():
            t0 = time.perf_counter()
            if buckets:
                vec = HashingVectorizer(
                    analyzer="char", ngram_range=(1, longest), n_features=buckets,
                    alternate_sign=False, norm=None, lowercase=False, preprocessor=as_latin1,
                )  # fmt: skip
                tfidf = TfidfTransformer(sublinear_tf=True)
                x_tr = tfidf.fit_transform(vec.transform([r["text"] for r in train]))
                x_te = tfidf.transform(vec.transform([r["text"] for r in test]))
            else:
                vec = TfidfVectorizer(
                    analyzer="char", ngram_range=(1, longest), sublinear_tf=True, min_df=2,
                    max_features=300_000,
                )  # fmt: skip
                x_tr = vec.fit_transform([r["text"] for r in train])
                x_te = vec.transform([r["text"] for r in test])
            clf = LinearSVC(C=0.5).fit(x_tr, [r[task] for r in train])
            acc = accuracy_score([r[task] for r in test], clf.predict(x_te))
            results["tasks"][task][name] = {"accuracy": acc, "seconds": time.perf_counter() - t0}
            print(
                f"{task:14s} {name:34s} {acc:.3f}  ({time.perf_counter() - t0:.0f} s)", flush=True
            )
    write_json(args.json, results)


if __name__ == "__main__":
    main()
