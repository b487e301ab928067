"""Bundles saved by an earlier release (tests/saved/, written by tests/saved/make.py at
the version in tests/saved/VERSION) load and answer as they did when saved: one per
trunk type that keeps files (n-gram, a composite of hashing and n-gram, a byte trunk
and one of its tiers, an exported ONNX graph) with every head kind and an MLP head."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import assert_same_answers

import manyheads

SAVED = Path(__file__).resolve().parent / "saved"
ANSWERS = sorted(SAVED.glob("*.answers.json"))


def test_every_saved_bundle_has_its_answers():
    assert {p.name.removesuffix(".answers.json") for p in ANSWERS} == {
        "ngram",
        "composite",
        "byte",
        "byte-8",
        "onnx",
    }


@pytest.mark.parametrize("answers", ANSWERS, ids=lambda p: p.name.removesuffix(".answers.json"))
def test_a_bundle_saved_before_answers_the_same(answers: Path, tmp_path: Path):
    doc = json.loads(answers.read_text(encoding="utf-8"))
    top = doc["folder"].split("/")[0]
    shutil.copytree(SAVED / top, tmp_path / top)  # loading may not write; a copy is safe
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    bundle = manyheads.Bundle.load(tmp_path / doc["folder"])
    got = bundle.predict(doc["texts"], max_chars=doc["max_chars"])
    # the same labels and score keys; scores to 1e-6, as BLAS kernels differ by CPU
    assert_same_answers(got, doc["answers"], atol=1e-6)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
