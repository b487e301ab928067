"""Head kinds as objects: the registry, each kind answering what callers once tested
its name for (checked against the rules as they were written before), a kind of one's
own added with one subclass and one ``register`` call, and a bundle saved before kinds
were objects loading and answering as it did."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from manyheads import Bundle, ConfigError, DataError, FusedHeads, LinearHead
from manyheads.heads.decode import activate, answers, decide
from manyheads.heads.kind import Multiclass
from manyheads.heads.kinds import (
    BINARY,
    HIERARCHICAL,
    KINDS,
    MULTICLASS,
    MULTILABEL,
    SET_KINDS,
    Kind,
    check_kind,
    check_labels,
    distinct_labels,
    kind_of,
    kind_problem,
    parent_index,
    register,
)
from manyheads.heads.record import check_record
from manyheads.heads.targets import encode_targets, known_rows, learn_targets

SNAPSHOT = Path(__file__).parent / "snapshots" / "kinds_bundle"
NAMES = ("multiclass", "binary", "multilabel", "hierarchical")
LABELS = {
    "multiclass": ["a", "b", "c"],
    "binary": ["no", "yes"],
    "multilabel": ["a", "b", "c"],
    "hierarchical": ["x", "x::a", "x::b", "y"],
}


def test_the_registry_maps_each_name_to_its_kind_and_a_kind_is_its_name():
    assert list(KINDS) == list(NAMES)
    assert [KINDS[n] for n in NAMES] == [MULTICLASS, BINARY, MULTILABEL, HIERARCHICAL]
    assert SET_KINDS == ("multilabel", "hierarchical")
    for name in NAMES:
        kind = check_kind(name)
        assert kind is KINDS[name] and kind_of(name) is kind and check_kind(kind) is kind
        assert isinstance(kind, Kind) and isinstance(kind, str)
        assert kind == name and kind.name == name and f"{kind}" == name and repr(kind) == repr(name)
        assert json.dumps({"kind": kind}) == json.dumps({"kind": name})
        assert type(kind.name) is str
    assert kind_problem("multiclass") is None
    assert kind_problem("tree") == (
        "kind must be one of multiclass, binary, multilabel, hierarchical, got 'tree'"
    )
    for bad in ("tree", ["multiclass"], None, 3):
        with pytest.raises(ConfigError, match="kind must be one of"):
            check_kind(bad, "task 't':")


# -- the rules as callers wrote them, name by name, before kinds were objects --------


def _old_activate(kind, z):
    if kind == "multiclass":
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    p = np.exp(-np.logaddexp(0, -z))
    if kind == "binary":
        p = p[:, 0]
        return np.stack([1 - p, p], axis=1)
    return p


def _old_decide(kind, proba, thresholds, parents):
    if kind in ("multilabel", "hierarchical"):
        hits = proba >= thresholds
        if kind == "hierarchical" and parents is not None:
            children = np.flatnonzero(parents >= 0)
            while True:
                kept = hits[:, children] & hits[:, parents[children]]
                if np.array_equal(kept, hits[:, children]):
                    break
                hits[:, children] = kept
        return hits.astype(np.int64)
    if kind == "binary":
        return (proba[:, 1] >= thresholds[0]).astype(np.int64)
    return np.argmax(proba, axis=1)


@pytest.mark.parametrize("name", NAMES)
def test_each_kind_decides_and_answers_as_the_branches_did(name):
    kind, labels = KINDS[name], LABELS[name]
    rng = np.random.default_rng(0)
    n_out = 1 if name == "binary" else len(labels)
    z = rng.normal(size=(50, n_out)).astype(np.float32) * 3
    thresholds = (
        None if name == "multiclass" else rng.uniform(0.2, 0.8, size=kind.n_thresholds(len(labels)))
    )
    parents = parent_index(labels, "::") if name == "hierarchical" else None
    proba = activate(name, z)
    np.testing.assert_array_equal(proba, _old_activate(name, z))
    np.testing.assert_array_equal(proba, kind.activate(z))
    picked = decide(name, proba, thresholds, parents)
    np.testing.assert_array_equal(picked, _old_decide(name, proba, thresholds, parents))
    got = answers(name, labels, thresholds, proba, "none", parents)
    rounded = np.round(proba.astype(np.float64), 6).tolist()
    if name in ("multilabel", "hierarchical"):
        expected = [
            {"labels": [lab for lab, h in zip(labels, row, strict=True) if h]} for row in picked
        ]
        assert kind.blank_answer() == {"labels": []} and kind.answer_field == "labels"
    else:
        expected = [
            {"label": labels[k], "score": ps[k]} for k, ps in zip(picked, rounded, strict=True)
        ]
        assert kind.blank_answer() == {"label": None, "score": None}
        assert kind.answer_field == "label"
    assert got == expected
    # what the estimators, records and metrics branched on
    assert kind.n_outputs(len(labels)) == (1 if name == "binary" else len(labels))
    assert kind.n_thresholds(len(labels)) == (len(labels) if name in SET_KINDS else 1)
    stored = None if name == "multiclass" else (len(labels) if name in SET_KINDS else 1)
    assert kind.stored_thresholds(len(labels)) == stored
    assert kind.is_set == (name in SET_KINDS)
    assert kind.exclusive == (name == "multiclass")
    assert kind.single_logit == (name == "binary")
    assert kind.uses_paths == (name == "hierarchical")
    assert kind.soft_targets == (name != "hierarchical")
    assert kind.record_fields("::") == ({"path_sep": "::"} if name == "hierarchical" else {})
    assert (kind.parents(labels, "::") is None) == (name != "hierarchical")
    np.testing.assert_array_equal(kind.flat_logits(z), z[:, 0] if name == "binary" else z)
    expected_cols = proba[:, 1:2] if name == "binary" else (None if name == "multiclass" else proba)
    cols = kind.thresholded(proba)
    assert (cols is None) == (expected_cols is None)
    if cols is not None:
        np.testing.assert_array_equal(cols, expected_cols)


def test_label_checks_keep_their_messages_per_kind():
    check_labels("h", "multiclass", ["a", 1.5, True])
    check_labels("h", "multilabel", [["a", 2], "b", ()])
    check_labels("h", "hierarchical", [["x::a"], "y"])
    with pytest.raises(DataError, match=r"a binary head takes one label .* use kind 'multilabel'"):
        check_labels("h", "binary", [["a"]])
    with pytest.raises(DataError, match=r"a multilabel head takes a list of labels per text"):
        check_labels("h", "multilabel", [[{"a": 1}]])
    with pytest.raises(DataError, match=r"a hierarchical head takes a list of label paths \(text"):
        check_labels("h", "hierarchical", [[3]])
    with pytest.raises(DataError, match="a string and a number that read the same"):
        check_labels("h", "multilabel", [["1"], [1]])
    assert distinct_labels("multiclass", ["b", "a", "b"]) == ["b", "a"]
    assert distinct_labels("multilabel", [["b", "a"], "c", ["a"]]) == ["b", "a", "c"]
    assert MULTICLASS.strata([1, "a"]) == ["1", "a"] and MULTILABEL.strata([["a"]]) is None
    assert MULTILABEL.label_key(["b", 1]) == ("1", "b") and BINARY.label_key("x") == "x"
    assert [k.label_word for k in KINDS.values()] == ["label", "label", "label set", "label set"]


def test_targets_are_read_per_kind_as_before():
    t = learn_targets("multiclass", ["b", None, "a"], missing=True)
    assert t.kind is MULTICLASS and t.classes == ["a", "b"]
    np.testing.assert_array_equal(t.y, [1, -100, 0])
    with pytest.raises(DataError, match="a binary head needs exactly 2 classes, got 3"):
        learn_targets("binary", ["a", "b", "c"])
    with pytest.raises(DataError, match=r"single class \('a'\)"):
        learn_targets("multiclass", ["a", "a"])
    t = learn_targets("hierarchical", [["x::a"], ["y"]], where="task 't': ")
    assert t.classes == ["x", "x::a", "y"]
    np.testing.assert_array_equal(t.y, [[1, 1, 0], [0, 0, 1]])
    with pytest.raises(DataError, match="task 't': label path 'x::' has an empty part"):
        learn_targets("hierarchical", [["x::"]], where="task 't': ")
    with pytest.raises(DataError, match="multilabel targets contain no label at all"):
        learn_targets("multilabel", [[], []])
    y = encode_targets("multilabel", [["a", "z"], []], ["a", "b"]).y
    np.testing.assert_array_equal(y, [[1, 0], [0, 0]])
    with pytest.raises(DataError, match="label 'z' was not seen in training"):
        encode_targets("multiclass", ["a", "z"], ["a", "b"])
    np.testing.assert_array_equal(
        encode_targets("multiclass", ["a", "z"], ["a", "b"], unseen=-1).y, [0, -1]
    )
    assert known_rows("binary", ["a", "z", "b"], ["a", "b"]) == ([0, 2], ["a", "b"])
    assert known_rows("multilabel", [["a", "z"]], ["a"]) == ([0], [["a"]])
    assert HIERARCHICAL.unseen([["x::q"]], {"x"}, "::") == ["x::q"]
    assert MULTICLASS.held_out(["a"], ["a"]) == (["a"], True)
    assert MULTILABEL.held_out([["a", "q"]], ["a"]) == ([["a"]], False)


def test_records_are_judged_per_kind():
    tensors = {"coef": np.zeros((2, 4), np.float32), "intercept": np.zeros(2, np.float32)}
    record = {"type": "linear", "kind": "multiclass", "labels": ["a", "b"], "temperature": 1.0}
    checked = check_record(record, tensors)
    assert checked.kind is MULTICLASS and checked.thresholds is None and checked.n_outputs == 2
    with pytest.raises(DataError, match="a binary head needs at least 2 labels, got 1"):
        check_record(record | {"kind": "binary", "labels": ["a"]}, tensors)
    with pytest.raises(DataError, match="a binary head has exactly 2 labels, got 3"):
        check_record(record | {"kind": "binary", "labels": ["a", "b", "c"]}, tensors)
    with pytest.raises(DataError, match="a multiclass head needs at least 2 labels, got 1"):
        check_record(record | {"labels": ["a"]}, tensors)
    with pytest.raises(DataError, match="hierarchical head: the label path separator"):
        check_record(record | {"kind": "hierarchical", "labels": ["x", "x::a"]}, tensors)
    with pytest.raises(DataError, match="label 'x::a' has no parent 'x'"):
        check_record(
            record | {"kind": "hierarchical", "labels": ["y", "x::a"], "path_sep": "::"}, tensors
        )
    binary = check_record(record | {"kind": "binary"}, {k: v[:1] for k, v in tensors.items()})
    np.testing.assert_array_equal(binary.thresholds, [0.5])


class Abstaining(Multiclass):
    """A kind of one's own: multiclass, but no label where the best class is unsure."""

    def answers(self, labels, picked, rounded):
        out = super().answers(labels, picked, rounded)
        return [a if a["score"] >= 0.6 else {"label": None, "score": a["score"]} for a in out]


@pytest.fixture
def abstaining():
    kind = register(Abstaining("abstaining"))
    try:
        yield kind
    finally:
        del KINDS["abstaining"]


def test_a_new_kind_is_a_subclass_and_one_register_call(abstaining):
    assert check_kind("abstaining") is abstaining and "abstaining" in KINDS
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(3, 8))
    y = rng.integers(0, 3, size=120)
    X = (centres[y] + rng.normal(scale=1.2, size=(120, 8))).astype(np.float32)
    labels = [["red", "green", "blue"][i] for i in y]
    head = LinearHead(kind="abstaining").fit(X, labels)
    plain = LinearHead(kind="multiclass").fit(X, labels)
    np.testing.assert_allclose(head.predict_proba(X), plain.predict_proba(X))
    ours = FusedHeads({"h": head}).predict(X)
    theirs = FusedHeads({"h": plain}).predict(X)
    assert any(a["h"]["label"] is None for a in ours)
    for mine, other in zip(ours, theirs, strict=True):
        sure = other["h"]["score"] >= 0.6
        assert mine["h"]["label"] == (other["h"]["label"] if sure else None)
    # through a bundle: fitted by name, saved, loaded, answered the same way
    texts = [f"{lab} {lab} thing {i}" for i, lab in enumerate(labels)]
    bundle = Bundle(trunk="hashing", cache=None)
    bundle.fit_head("colour", texts, labels, kind="abstaining")
    assert bundle.head_info["colour"]["kind"] == "abstaining"


def test_a_bundle_saved_before_kinds_were_objects_loads_and_answers_the_same(tmp_path):
    folder = tmp_path / "bundle"
    folder.mkdir()
    for name in ("bundle.json", "heads.safetensors"):
        shutil.copy(SNAPSHOT / name, folder / name)
    kept = json.loads((SNAPSHOT / "answers.json").read_text())
    bundle = Bundle.load(folder, cache=None)
    assert {info["kind"] for info in bundle.head_info.values()} == set(NAMES)
    for scores, expected in kept["answers"].items():
        assert bundle.predict(kept["texts"], scores=scores) == expected
    for name in bundle.head_info:  # each estimator answers its head's way too
        head = bundle.heads[name]
        assert head.head_kind is KINDS[bundle.head_info[name]["kind"]]
        X = bundle.embed(kept["texts"][:3])
        picked = head.predict(X)
        assert len(picked) == 3
    # saved again, every head's record and tensors are as they were
    bundle.save(tmp_path / "again")
    before = json.loads((SNAPSHOT / "bundle.json").read_text())["heads"]
    after = json.loads((tmp_path / "again" / "bundle.json").read_text())["heads"]
    assert json.dumps(after) == json.dumps(before)
    from safetensors.numpy import load_file

    old, new = (
        load_file(SNAPSHOT / "heads.safetensors"),
        load_file(tmp_path / "again" / "heads.safetensors"),
    )
    assert sorted(old) == sorted(new)
    for key in old:
        np.testing.assert_array_equal(old[key], new[key])
