"""Write the saved bundles that tests/test_saved.py loads: one bundle per trunk type
and head kind, small, each with the answers it gave when it was saved
(``NAME.answers.json``). Run once by the release whose bundles they keep (its version is
in ``VERSION``); never rerun to make the test pass: the point is that bundles saved
by older code load and answer the same.

    python tests/saved/make.py
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

import manyheads  # noqa: E402
from manyheads.train.byte import train_byte_trunk  # noqa: E402
from manyheads.trunks.byte import ByteConfig  # noqa: E402

TEXTS = [
    "a library of routines for parsing XML documents",
    "command line tool to convert images between formats",
    "documentation for the Python bindings",
    "Bibliothek zum Lesen von Bilddateien",
    "",
    "x" * 3000,
    "fonts for the console 🙂 https://example.org/a?b=1",
]


def _rows(n: int) -> list[dict]:
    rows = []
    with gzip.open(ROOT / "examples" / "debian-en-train.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if len(rows) >= n:
                break
    return rows


def _heads(bundle: manyheads.Bundle, rows: list[dict], *, mlp: bool) -> None:
    texts = [r["text"] for r in rows]
    top = sorted({r["section"] for r in rows}, key=lambda s: -sum(r["section"] == s for r in rows))
    keep = set(top[:4])
    section = [r["section"] if r["section"] in keep else "other" for r in rows]
    bundle.fit_head("section", texts, section, "multiclass", seed=0)
    bundle.fit_head("library", texts, [r["library"] for r in rows], "binary", seed=0)
    bundle.fit_head("role", texts, [r["role"] for r in rows], "multilabel", seed=0)
    paths = [
        [f"{s}::{'lib' if r['library'] else 'app'}"] for s, r in zip(section, rows, strict=True)
    ]
    bundle.fit_head("place", texts, paths, "hierarchical", seed=0)
    if mlp:
        bundle.fit_head("section_mlp", texts, section, "multiclass", head="mlp", seed=0)


def _answers(folder: Path, name: str, max_chars: int | None) -> None:
    """``NAME.answers.json``: what the bundle in ``folder``, loaded, answers to TEXTS."""
    answers = manyheads.Bundle.load(folder).predict(TEXTS, max_chars=max_chars)
    doc = {"folder": str(folder.relative_to(HERE)), "max_chars": max_chars, "texts": TEXTS}
    (HERE / f"{name}.answers.json").write_text(
        json.dumps({**doc, "answers": answers}, ensure_ascii=False, indent=0) + "\n"
    )


def _save(bundle: manyheads.Bundle, name: str) -> None:
    folder = HERE / name
    if folder.exists():
        shutil.rmtree(folder)
    bundle.save(folder)
    _answers(folder, name, 1000)


def _exported(rows: list[dict]) -> None:
    """A bundle on a tiny random BERT (conftest's), exported to ONNX: its graph and
    tokenizer inside the folder, the transformer folder not needed to load it."""
    import tempfile

    from conftest import _build_tiny_model

    from manyheads.export.onnx import export_bundle

    with tempfile.TemporaryDirectory() as tmp:
        model = _build_tiny_model(Path(tmp) / "tiny", sentence_transformers=False)
        bundle = manyheads.Bundle(trunk=str(model))
        texts = [r["text"] for r in rows]
        bundle.fit_head("library", texts, [r["library"] for r in rows], "binary", seed=0)
        bundle.fit_head("role", texts, [r["role"] for r in rows], "multilabel", seed=0)
        folder = HERE / "onnx"
        if folder.exists():
            shutil.rmtree(folder)
        export_bundle(bundle, folder)
    _answers(folder, "onnx", None)


def main() -> None:
    rows = _rows(300)
    texts = [r["text"] for r in rows]
    ngram = {"type": "ngram", "dim": 1024}
    hashing = {"type": "hashing", "dim": 512}
    composite = {"type": "composite", "parts": [hashing, ngram], "weights": [1.0, 0.5]}
    for name, trunk in (("ngram", ngram), ("composite", composite)):
        bundle = manyheads.Bundle(trunk=trunk)
        _heads(bundle, rows, mlp=name == "ngram")
        _save(bundle, name)
    config = ByteConfig(
        max_bytes=128,
        embed=16,
        channels=32,
        dilations=(1, 2),
        heads=2,
        dims=(8, 16, 32),
        bag=1024,
        bag_dim=16,
    )
    tasks = {"section": ([r["section"] for r in rows], "multiclass")}
    trunk, _ = train_byte_trunk(texts, tasks, config=config, epochs=3, batch_size=32, seed=0)
    bundle = manyheads.Bundle(trunk=trunk.with_tier(16))
    _heads(bundle, rows, mlp=False)
    _save(bundle, "byte")
    saved = manyheads.Bundle.load(HERE / "byte")
    sub = manyheads.Bundle(trunk=saved.trunk.with_tier(8))
    sub.fit_head("library", texts, [r["library"] for r in rows], "binary", seed=0)
    saved.save_tiers({8: sub})
    _answers(HERE / "byte" / "tiers" / "8", "byte-8", None)
    _exported(rows)
    (HERE / "VERSION").write_text(manyheads.__version__ + "\n")


if __name__ == "__main__":
    main()
