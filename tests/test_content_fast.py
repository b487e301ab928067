"""The built-in `content-fast` bundle: `content`'s four heads on the `ngram` trunk."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from manyheads import Bundle
from manyheads.bundle import BUILTIN_BUNDLES, builtin_root, copy_bundle
from manyheads.errors import BundleError

ROOT = Path(__file__).resolve().parents[1]
FOLDER = builtin_root() / "content-fast"


@pytest.fixture(scope="module")
def fast() -> Bundle:
    return Bundle.load("content-fast", cache=None)


def test_it_is_a_builtin_bundle_in_the_package_and_small():
    assert "content-fast" in BUILTIN_BUNDLES
    assert Bundle.load("content-fast", cache=None).path == FOLDER
    size = sum(f.stat().st_size for f in FOLDER.rglob("*") if f.is_file())
    assert size <= 6 * 1024 * 1024, f"content-fast bundle is {size / 1e6:.2f} MB"
    assert not list(FOLDER.rglob(".lock"))
    sources = json.loads((FOLDER / "SOURCES.json").read_text(encoding="utf-8"))
    assert set(sources["heads"]) == {"code_language", "language", "kind", "risk"}
    assert sources["test"]["language_20"] > 0.8
    assert "models/content-fast/*" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_it_answers_contents_four_heads_with_contents_labels(fast):
    assert fast.trunk_name == "ngram"
    doc = json.loads((builtin_root() / "content" / "bundle.json").read_text(encoding="utf-8"))
    assert set(fast.heads) == set(doc["heads"]) == {"code_language", "language", "kind", "risk"}
    for name, head in doc["heads"].items():
        assert fast.head_info[name]["kind"] == head["kind"], name
        assert list(fast.labels(name)) == head["labels"], name


def test_obvious_answers(fast):
    texts = [
        "Der schnelle braune Fuchs springt über den faulen Hund und läuft in den Wald.",
        "Le renard brun rapide saute par-dessus le chien paresseux dans la forêt.",
        '#include <stdio.h>\nint main(void) {\n    printf("hi\\n");\n    return 0;\n}\n',
        "import os\nprint(os.getcwd())",
        "",
    ]
    got = fast.predict(texts)
    assert [g["language"]["label"] for g in got[:2]] == ["de", "fr"]
    assert got[0]["kind"]["label"] == "prose"
    assert got[2]["kind"]["label"] == "code" and got[3]["code_language"]["label"] == "python"
    assert got[3]["language"]["label"] == "zxx"
    assert got[4]["kind"] == {"label": None, "score": None, "scores": {}}  # empty: no label
    assert got[4]["risk"] == {"labels": [], "scores": {}}


def test_it_is_read_only_and_copies_to_a_folder_of_ones_own(tmp_path):
    builtin = Bundle.load("content-fast", cache=None)
    builtin.remove_head("risk")
    message = "the built-in bundle 'content-fast' is read-only .* manyheads copy content-fast DIR"
    with pytest.raises(BundleError, match=message):
        builtin.save(FOLDER)
    mine = copy_bundle("content-fast", tmp_path / "mine")
    b = Bundle.load(mine, cache=None)
    b.remove_head("risk")
    b.save(mine)
    assert set(Bundle.load(mine, cache=None).heads) == {"code_language", "language", "kind"}


def test_cli_predict_names_it(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "manyheads.cli", "predict", "-b", "content-fast", "def f(): pass"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    answer = json.loads(out.stdout.strip().splitlines()[0])
    assert set(answer) == {"code_language", "language", "kind", "risk"}
    assert answer["kind"]["label"] == "code"


def test_the_build_script_needs_the_rows_file(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import build_content_fast as build

    with pytest.raises(SystemExit, match="no rows at .*nope.jsonl.gz: write them with"):
        build.main(["--rows", str(tmp_path / "nope.jsonl.gz"), "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()
