"""``eval --report``: report.json and a self-contained report.html whose every figure a
real headless browser shows."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from manyheads import Bundle
from manyheads.errors import MissingDependencyError

pytest.importorskip("matplotlib")

FIGURES = {
    "section": ["confusions", "f1", "reliability", "scores"],  # 30+ sections: top confusions
    "library": ["confusion", "f1", "reliability", "scores"],
    "role": ["f1", "reliability", "scores"],
    "tree": ["f1", "levels", "reliability", "scores"],  # hierarchical: library::section
}


def _tree(row: dict) -> list[str]:
    return [f"{row['library']}::{row['section']}"]


@pytest.fixture(scope="module")
def reported(tmp_path_factory, debian_rows, debian_test_rows) -> Path:
    b = Bundle(trunk="hashing", cache=None)
    texts = [r["text"] for r in debian_rows]
    b.fit_head("section", texts, [r["section"] for r in debian_rows])
    b.fit_head("library", texts, [r["library"] for r in debian_rows], kind="binary")
    b.fit_head("role", texts, [r["role"] for r in debian_rows], kind="multilabel")
    b.fit_head("tree", texts, [_tree(r) for r in debian_rows], kind="hierarchical")
    folder = tmp_path_factory.mktemp("report")
    labels = {h: [r[h] for r in debian_test_rows] for h in FIGURES if h != "tree"}
    labels["tree"] = [_tree(r) for r in debian_test_rows]
    metrics = b.evaluate([r["text"] for r in debian_test_rows], labels, report=folder)
    doc = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    assert metrics == {head: entry["metrics"] for head, entry in doc["heads"].items()}
    return folder


@pytest.mark.heavy  # figures drawn / bundles trained through the CLI
def test_report_json_holds_metrics_f1_per_label_and_reliability(reported):
    doc = json.loads((reported / "report.json").read_text(encoding="utf-8"))
    assert set(doc["heads"]) == set(FIGURES)
    for head, figures in FIGURES.items():
        entry = doc["heads"][head]
        assert entry["figures"] == figures
        assert 0 <= entry["metrics"]["accuracy"] <= 1
        f1 = entry["f1_per_label"]
        assert f1 and all(0 <= v <= 1 for v in f1.values())
        for when in ("before", "after"):
            bins = entry["reliability"][when]
            assert sum(b["n"] for b in bins) > 0
            assert all(0 <= b["confidence"] <= 1 and 0 <= b["accuracy"] <= 1 for b in bins)
    assert set(doc["heads"]["library"]["f1_per_label"]) == {"no", "yes"}


@pytest.mark.heavy
def test_every_figure_is_shown_in_a_real_browser(reported, browser):
    browser.get((reported / "report.html").as_uri())
    shown = browser.execute_script(
        """return [...document.querySelectorAll('figure')].map(f => {
             const img = f.querySelector('img'); const box = img.getBoundingClientRect();
             return [f.dataset.head, f.dataset.figure, img.complete && img.naturalWidth > 0,
                     box.width > 50 && box.height > 50];
           });"""
    )
    want = [[h, f, True, True] for h, figs in FIGURES.items() for f in figs]
    assert shown == want
    assert "http" not in (reported / "report.html").read_text().split("<body>")[1]  # no link out


def test_a_report_needs_matplotlib_before_the_trunk_pass(monkeypatch, counting_trunk, tmp_path):
    b = Bundle(trunk=counting_trunk, cache=None)
    b.fit_head("t", ["a b", "c d", "e f", "g h"] * 3, ["x", "y"] * 6)
    calls = counting_trunk.calls
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'manyheads\[report\]'"):
        b.evaluate(["a b"], {"t": ["x"]}, report=tmp_path / "r")
    assert counting_trunk.calls == calls and not (tmp_path / "r").exists()


@pytest.mark.heavy  # figures drawn / bundles trained through the CLI
def test_the_command_writes_the_report_and_says_where(tmp_path, capsys, debian_rows):
    from conftest import TEST_FILE, TRAIN_FILE

    from manyheads.cli import main

    bundle = tmp_path / "b"
    args = ["--trunk", "hashing", "--task", "library:binary"]
    assert main(["train", str(TRAIN_FILE), "-b", str(bundle), *args]) == 0
    capsys.readouterr()
    assert main(["eval", str(TEST_FILE), "-b", str(bundle), "--report", str(tmp_path / "r")]) == 0
    assert f"report: {tmp_path / 'r' / 'report.html'}" in capsys.readouterr().err
    assert (tmp_path / "r" / "report.json").is_file()
