"""Hierarchical heads: label paths, answers consistent by construction (never a child
without its parent), hierarchical metrics, records, the command line."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from manyheads import Bundle, DataError
from manyheads.data import LIST_KINDS
from manyheads.errors import BundleError
from manyheads.evaluate.metrics import hierarchical_metrics
from manyheads.heads.decode import decide
from manyheads.heads.kinds import SET_KINDS, expand_paths, parent_index

LEAVES = {
    "animal::cat": "whiskers purr",
    "animal::dog": "bark fetch",
    "animal::bird": "wings feather",
    "plant::tree": "trunk bark leaves",
    "plant::flower": "petal bloom",
    "tool": "hammer wrench",
}
NOISE = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
]


def _rows(n: int, seed: int = 0) -> tuple[list[str], list[list[str]]]:
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        chosen = rng.sample(sorted(LEAVES), rng.choice([1, 1, 2]))
        words = [w for leaf in chosen for w in LEAVES[leaf].split()]
        words += rng.choices(NOISE, k=6)
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(chosen)
    return texts, labels


@pytest.fixture(scope="module")
def trained() -> Bundle:
    texts, labels = _rows(400)
    b = Bundle(trunk="hashing", cache=None)
    b.fit_head("kind_of", texts, labels, kind="hierarchical")
    return b


def test_paths_expand_to_every_ancestor_and_empty_parts_are_refused():
    assert expand_paths(["a::b::c", "a::d"], "::") == ["a", "a::b", "a::b::c", "a::d"]
    assert expand_paths("x/y", "/") == ["x", "x/y"]
    for bad in ("a::", "::a", "a::::b", " ::b"):
        with pytest.raises(DataError, match=f"label path {bad!r} has an empty part"):
            expand_paths([bad], "::")
    assert parent_index(["a", "a::b", "c", "a::b::d"], "::").tolist() == [-1, 0, -1, 1]
    with pytest.raises(DataError, match="label 'a::b' has no parent 'a' among the labels"):
        parent_index(["a::b"], "::")
    assert "hierarchical" in SET_KINDS
    assert LIST_KINDS == SET_KINDS  # data files read a list per text for these kinds


def test_the_decision_never_picks_a_child_without_its_parent():
    labels = ["a", "a::b", "a::b::c", "d", "d::e"]
    parents = parent_index(labels, "::")
    proba = np.random.default_rng(0).random((500, len(labels)))
    picked = decide("hierarchical", proba, np.full(len(labels), 0.5), parents)
    flat = decide("multilabel", proba, np.full(len(labels), 0.5))
    for child, parent in enumerate(parents):
        if parent >= 0:
            assert not (picked[:, child] & ~picked[:, parent]).any()
            assert (flat[:, child] & ~flat[:, parent]).any()  # the flat decision would
    # a node is kept exactly when it and all its ancestors reach their thresholds
    assert (picked[:, 2] == (flat[:, 0] & flat[:, 1] & flat[:, 2])).all()


def test_hierarchical_metrics_by_hand():
    labels = ["a", "a::b", "c"]
    parents = parent_index(labels, "::")
    truth = np.array([[1, 1, 0], [0, 0, 1]])
    picked = np.array([[1, 0, 0], [1, 0, 1]])
    m = hierarchical_metrics(truth, picked, parents)
    # text 1: true {a, a::b}, answered {a}; text 2: true {c}, answered {a, c}
    assert m["hierarchical_precision"] == pytest.approx(2 / 3)
    assert m["hierarchical_recall"] == pytest.approx(2 / 3)
    assert m["hierarchical_f1"] == pytest.approx(2 / 3)
    assert m["f1_per_level"] == {"1": pytest.approx(0.8), "2": 0.0}
    assert m["inconsistent"] == 0
    assert (
        hierarchical_metrics(truth, np.array([[0, 1, 0], [0, 0, 0]]), parents)["inconsistent"] == 1
    )


def test_a_hierarchical_head_answers_paths_with_their_ancestors(trained, tmp_path):
    texts, labels = _rows(200, seed=1)
    answers = trained.predict(texts)
    for answer in answers:
        got = set(answer["kind_of"]["labels"])
        assert all(label.rpartition("::")[0] in got for label in got if "::" in label)
    right = sum(
        set(a["kind_of"]["labels"]) == set(expand_paths(want, "::"))
        for a, want in zip(answers, labels, strict=True)
    )
    assert right / len(labels) > 0.8
    assert trained.head_info["kind_of"]["kind"] == "hierarchical"
    metrics = trained.evaluate(texts, {"kind_of": labels})["kind_of"]
    assert metrics["inconsistent"] == 0 and metrics["hierarchical_f1"] > 0.9
    assert set(metrics["f1_per_level"]) == {"1", "2"}
    trained.save(tmp_path / "b")
    again = Bundle.load(tmp_path / "b", cache=None)
    assert again.predict(texts) == answers
    record = json.loads((tmp_path / "b" / "bundle.json").read_text())["heads"]["kind_of"]
    assert record["kind"] == "hierarchical" and record["path_sep"] == "::"


def test_an_mlp_hierarchical_head_answers_consistently(tmp_path):
    pytest.importorskip("torch")
    texts, labels = _rows(300)
    b = Bundle(trunk="hashing", cache=None)
    b.fit_head("kind_of", texts, labels, kind="hierarchical", head="mlp")
    test_texts, want = _rows(100, seed=2)
    metrics = b.evaluate(test_texts, {"kind_of": want})["kind_of"]
    assert metrics["inconsistent"] == 0 and metrics["hierarchical_f1"] > 0.8
    b.save(tmp_path / "b")
    assert Bundle.load(tmp_path / "b", cache=None).predict(test_texts) == b.predict(test_texts)


def test_another_separator_and_bad_paths_cost_no_trunk_pass(counting_trunk):
    texts, labels = _rows(120)
    slashed = [[p.replace("::", "/") for p in paths] for paths in labels]
    b = Bundle(trunk=counting_trunk, cache=None)
    b.fit_head("k", texts, slashed, kind="hierarchical", path_sep="/", val_fraction=0)
    assert set(b.predict(["whiskers purr the"])[0]["k"]["labels"]) <= {"animal", "animal/cat"}
    calls = counting_trunk.calls
    with pytest.raises(DataError, match=r"head 'k2': label #3: label path 'animal/' has an"):
        b.fit_head("k2", texts[:4], [["tool"], ["tool"], ["tool"], ["animal/"]],
                   kind="hierarchical", path_sep="/")  # fmt: skip
    with pytest.raises(ValueError, match="path_sep must be a non-empty string"):
        b.fit_head("k2", texts[:4], [["tool"]] * 4, kind="hierarchical", path_sep="")
    with pytest.raises(DataError, match="a hierarchical head takes a list of label paths"):
        b.fit_head("k2", texts[:4], [[1], [2], [1], [2]], kind="hierarchical")
    assert counting_trunk.calls == calls


def test_a_stored_record_must_hold_its_separator_and_every_parent(trained, tmp_path):
    trained.save(tmp_path / "b")
    doc_path = tmp_path / "b" / "bundle.json"
    doc = json.loads(doc_path.read_text())
    record = doc["heads"]["kind_of"]
    for change, message in (
        ({"path_sep": None}, "separator must be a non-empty string"),
        ({"labels": [1, *record["labels"][1:]]}, "a hierarchical head's labels are paths"),
        ({"labels": [*record["labels"][:-1], "ghost::x"]}, "has no parent 'ghost'"),
    ):
        broken = json.loads(json.dumps(doc))
        broken["heads"]["kind_of"].update(change)
        doc_path.write_text(json.dumps(broken))
        with pytest.raises(BundleError, match=f"head 'kind_of': .*{message}"):
            Bundle.load(tmp_path / "b", cache=None)


def test_the_command_trains_and_evaluates_a_hierarchical_head(tmp_path, capsys):
    from manyheads.cli import main

    texts, labels = _rows(200)
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"text": t, "tags": y}) + "\n" for t, y in zip(texts, labels, strict=True)
        )
    )
    bundle = str(tmp_path / "b")
    assert (
        main(["train", str(data), "-b", bundle, "--trunk", "hashing", "-t", "tags:hierarchical"])
        == 0
    )
    capsys.readouterr()
    assert main(["eval", str(data), "-b", bundle, "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["heads"]["tags"]
    assert metrics["kind"] == "hierarchical" and metrics["inconsistent"] == 0
    assert {"hierarchical_precision", "hierarchical_recall", "hierarchical_f1"} <= set(metrics)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a b", "tags": ["tool"]}\n{"text": "c d", "tags": ["x::"]}\n')
    args = ["train", str(bad), "-b", str(tmp_path / "c"), "--trunk", "hashing"]
    assert main([*args, "-t", "tags:hierarchical"]) == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("bad.jsonl: row 2: label path 'x::' has an empty part (separator '::')")
    )
    assert main([*args, "-t", "tags:hierarchical", "--label-path-sep", " "]) == 1
    assert "--label-path-sep must be a non-empty string without spaces" in capsys.readouterr().err
