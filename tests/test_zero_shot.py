"""Heads from label names: every kind, the prior a head learns with, bad input in one line,
the command line and the service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from manyheads import Bundle
from manyheads.cli import main
from manyheads.errors import ConfigError, DataError
from manyheads.heads.linear import LinearHead
from manyheads.train.zero_shot import MAX_DESCRIPTION

KEY = "k3y-for-tests-0123456789abcdef"
TOPICS = {
    "sports": "games, teams, players, matches",
    "politics": "elections, government, parliament",
    "cooking": "recipes, food, kitchen, baking",
}
TEXTS = {
    "sports": "The team won the championship game after the players scored twice",
    "politics": "The parliament voted on the election law and the government fell",
    "cooking": "Mix the flour with butter and bake the bread in the kitchen",
}


@pytest.fixture(scope="module")
def minilm_bundle() -> Bundle:
    """A bundle on MiniLM (a trunk that maps meaning and loads in seconds), no heads."""
    return Bundle(trunk="minilm", cache=None)


def _label(bundle: Bundle, head: str, text: str) -> Any:
    answer = bundle.predict([text])[0][head]
    return answer.get("label", answer.get("labels"))


def test_every_kind_answers_from_names_alone(minilm_bundle: Bundle) -> None:
    b = minilm_bundle.copy()
    b.add_head_from_labels("topic", TOPICS)
    b.add_head_from_labels("sporty", ["sports"], "binary")
    b.add_head_from_labels("tags", TOPICS, "multilabel")
    tree = {"food::baking": "bread, cakes, flour", "food::meat": "beef, pork", "sport": "games"}
    b.add_head_from_labels("tree", tree, "hierarchical")
    for label, text in TEXTS.items():
        assert _label(b, "topic", text) == label
        assert label in _label(b, "tags", text)
    assert _label(b, "sporty", TEXTS["sports"]) == "sports"
    assert _label(b, "sporty", TEXTS["cooking"]) == "not sports"
    assert b.labels("sporty") == ["not sports", "sports"]
    assert _label(b, "tree", TEXTS["cooking"])[:2] == ["food", "food::baking"]
    assert set(b.labels("tree")) == {"food", "food::baking", "food::meat", "sport"}
    info = b.head_info["topic"]
    assert info["label_names"] == TOPICS and info["n_train"] == 0
    assert info["made"] == {
        "from": "labels",
        "examples": 0,
        "templates": ["{name}", "{name}: {description}", "This is about {name}."],
    }
    # one block of the fused product: the same answers as the head alone
    alone = minilm_bundle.copy()
    alone.add_head_from_labels("topic", TOPICS)
    text = [TEXTS["politics"]]
    assert alone.predict(text)[0]["topic"] == b.predict(text)[0]["topic"]


def test_the_names_survive_a_save_and_a_relabel_rebuilds_the_head(
    minilm_bundle: Bundle, tmp_path: Path
) -> None:
    b = minilm_bundle.copy()
    b.add_head_from_labels("topic", {"sports": None, "politics": None, "cooking": None})
    b.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b", cache=None)
    assert loaded.head_labels("topic") == {"sports": "", "politics": "", "cooking": ""}
    before = loaded.heads["topic"].coef_.copy()
    loaded.relabel_head("topic", {"cooking": "recipes, food, kitchen, baking"})
    assert loaded.head_labels("topic")["cooking"] == "recipes, food, kitchen, baking"
    assert not np.allclose(before, loaded.heads["topic"].coef_)
    with pytest.raises(DataError, match="head 'topic' has no label 'music'; its labels: sports"):
        loaded.relabel_head("topic", {"music": "songs"})
    loaded.fit_head("rows", list(TEXTS.values()) * 2, list(TEXTS) * 2)
    with pytest.raises(DataError, match="head 'rows' was not made from label names"):
        loaded.relabel_head("rows", {"sports": "x"})


@pytest.mark.parametrize(
    ("labels", "kind", "message"),
    [
        ({}, "multiclass", "head 'h': no labels named"),
        ([], "multiclass", "head 'h': no labels named"),
        (["sports"], "multiclass", "a multiclass head needs at least two labels, got 1"),
        (["a", "b", "a"], "multiclass", "head 'h': label 'a' is named twice"),
        (["a", " a "], "multiclass", "head 'h': label 'a' is named twice"),
        ({"a": "x" * (MAX_DESCRIPTION + 1), "b": None}, "multiclass", "a description of 2,001"),
        ({"a": 3, "b": None}, "multiclass", "label 'a': a description must be text, got int"),
        ([3, "b"], "multiclass", "a label name must be non-empty text, got 3"),
        (["", "b"], "multiclass", "a label name must be non-empty text, got ''"),
        ("sports", "multiclass", "labels must be a mapping of names to descriptions or a list"),
        (["a", "b", "c"], "binary", "a binary head takes one or two labels, got 3"),
        (["a\ud800", "b"], "multiclass", "lone surrogate"),
        (["a::", "b"], "hierarchical", "label 'a::' has an empty part"),
    ],
)
def test_bad_names_are_one_line_and_change_nothing(
    minilm_bundle: Bundle, labels: Any, kind: str, message: str
) -> None:
    b = minilm_bundle.copy()
    with pytest.raises(DataError, match=message.replace("(", r"\(")) as found:
        b.add_head_from_labels("h", labels, kind)
    assert "\n" not in str(found.value)
    assert "h" not in b.heads


def test_a_trunk_that_does_not_map_meaning_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="trunk 'hashing' cannot make heads from label names"):
        Bundle(trunk="hashing").add_head_from_labels("h", ["a", "b"])
    with pytest.raises(ConfigError, match="the trunk is fitted on texts first"):
        Bundle(trunk="minilm+tfidf").add_head_from_labels("h", ["a", "b"])


@pytest.mark.heavy  # encodes 200 rows with MiniLM
def test_a_composite_with_a_meaning_part_makes_heads_from_names(debian_rows: list) -> None:
    b = Bundle(trunk="minilm+tfidf", cache=None)  # the tfidf part gives zeros
    rows = debian_rows[:200]
    b.fit_head("section", [r["text"] for r in rows], [r["section"] for r in rows])
    b.add_head_from_labels("topic", TOPICS)
    vectors = b.trunk.encode_labels(["sports"])
    static_dim = b.trunk.parts[0].dim  # minilm's
    assert np.abs(vectors[0, static_dim:]).max() == 0 and np.abs(vectors[0, :static_dim]).max() > 0
    assert _label(b, "topic", TEXTS["cooking"]) == "cooking"


def test_examples_learn_with_the_names_as_prior(minilm_bundle: Bundle) -> None:
    b = minilm_bundle.copy()
    b.add_head_from_labels("topic", TOPICS)
    # rows of two labels only: the third keeps its weights from its name
    texts = ["A striker scored in the final", "The senate passed the budget"]
    b.fit_head("topic", texts, ["sports", "politics"], val_fraction=0.0)
    assert b.labels("topic") == ["cooking", "politics", "sports"]
    info = b.head_info["topic"]
    assert info["made"]["from"] == "labels and examples" and info["made"]["examples"] == 2
    assert info["label_names"] == TOPICS
    for label, text in TEXTS.items():
        assert _label(b, "topic", text) == label
    # without the prior, two rows know two labels
    plain = Bundle(trunk="minilm", cache=None)
    plain.fit_head("topic", texts, ["sports", "politics"], val_fraction=0.0)
    assert plain.labels("topic") == ["politics", "sports"]


def test_the_prior_pulls_the_weights_of_a_label_without_rows_to_its_own() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 6)).astype(np.float32)
    y = np.where(X[:, 0] > 0, "a", "b")
    prior = LinearHead(C=1.0).fit(X, np.where(X[:, 1] > 0, "a", "c"))  # knows 'c'
    head = LinearHead(C=1.0, prior=prior).fit(X, y)
    assert head.classes_.tolist() == ["a", "b", "c"]
    # no row says 'c': its weights keep the direction the prior gives them
    c, p = head.coef_[2], prior.coef_[1]
    assert c @ p / np.linalg.norm(c) / np.linalg.norm(p) > 0.9
    # a strong prior (small C) holds every weight and offset near it
    held = LinearHead(C=1e-4, prior=prior).fit(X, y)
    np.testing.assert_allclose(held.coef_[[0, 2]], prior.coef_, atol=0.02)
    np.testing.assert_allclose(held.intercept_[[0, 2]], prior.intercept_, atol=0.02)
    with pytest.raises(ConfigError, match="prior must be a fitted multiclass LinearHead"):
        LinearHead(prior=LinearHead()).fit(X, y)


def test_rows_that_mislead_leave_the_prior_standing() -> None:
    """With a prior, C="auto" may walk below the 1/64 a head without one stops at: rows
    that disagree with what validation rows say keep the head at the prior's answers
    (a few examples must never make a head from names worse)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 6)).astype(np.float32)
    truth = np.where(X[:, 0] > 0, "a", "b")
    prior = LinearHead(C=1.0).fit(X[:200], truth[:200])
    few, val, test = slice(200, 212), slice(212, 300), slice(300, 400)
    flipped = np.where(truth[few] == "a", "b", "a")  # every example wrong
    head = LinearHead(C="auto", prior=prior).fit(X[few], flipped, X_val=X[val], y_val=truth[val])
    assert head.C_ < 1 / 64
    assert (head.predict(X[test]) == prior.predict(X[test])).mean() >= 0.98


def test_corrections_update_a_head_made_from_names(minilm_bundle: Bundle, tmp_path: Path) -> None:
    b = minilm_bundle.copy()
    b.add_head_from_labels("topic", TOPICS)
    b.save(tmp_path / "b")
    b = Bundle.load(tmp_path / "b", cache=None)
    texts = [
        "The goalkeeper saved a penalty",
        "Whisk the eggs and fry them in a pan",
        "The minister resigned after the vote",
    ] * 4
    labels = ["sports", "cooking", "politics"] * 4
    b.add_feedback(texts, {"topic": labels})
    (update,) = b.update_heads().heads
    assert update.promoted and update.fit == "warm", update.reason
    info = Bundle.load(tmp_path / "b", cache=None).head_info["topic"]
    assert info["made"]["from"] == "labels and examples"
    assert info["label_names"] == TOPICS


# -- command line -----------------------------------------------------------------


def _run(capsys: Any, *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_adds_shows_and_relabels(tmp_path: Path, capsys: Any) -> None:
    folder = tmp_path / "b"
    code, out, err = _run(
        capsys, "heads", "add", "topic", "-b", folder, "--trunk", "minilm",
        "-l", "sports: games, teams, players", "-l", "politics", "-l", "cooking: recipes, food",
    )  # fmt: skip
    assert code == 0, err
    assert "added head 'topic' (multiclass, 3 labels, made from their names on trunk minilm)" in out
    code, out, _ = _run(capsys, "predict", "-b", folder, TEXTS["sports"])
    assert json.loads(out)["topic"]["label"] == "sports"
    code, out, _ = _run(capsys, "heads", "show", "topic", "-b", folder)
    assert "made from labels" in out and "games, teams, players" in out
    code, out, _ = _run(capsys, "heads", "relabel", "topic", "-b", folder, "-l", "politics: votes")
    assert code == 0 and "votes" in out
    names = tmp_path / "labels.json"
    names.write_text(json.dumps({"yes": "about sports", "no": None}))
    code, out, err = _run(
        capsys, "heads", "add", "sporty", "-b", folder, "--labels-file", names, "--kind", "binary"
    )
    assert code == 0, err
    code, out, _ = _run(capsys, "heads", "show", "sporty", "-b", folder, "--json")
    assert json.loads(out)["named"] == {"yes": "about sports", "no": ""}


@pytest.mark.parametrize(
    ("args", "content", "message"),
    [
        (["-l", "a", "--labels-file", "{file}"], "[]", "with --label or with --labels-file"),
        (["--labels-file", "{file}"], "{not json", "labels.json: not JSON"),
        (["--labels-file", "{file}"], "[" * 5000 + "]" * 5000, "not JSON (JSON nested too deep"),
        (["--labels-file", "{file}"], b'{"a": "x\xff"}', "labels.json: not UTF-8 text (byte 8)"),
        (["--labels-file", "{file}"], '"a"', "a JSON object mapping each label"),
        (["--labels-file", "{file}"], "[1, 2]", "label #0 must be text, got int"),
        (["--labels-file", "{missing}"], "", "no such labels file"),
        (["-l", "a", "-l", "a"], "", "label 'a' is named twice"),
        (["-l", "a", "--trunk", "hashing"], "", "a multiclass head needs at least two labels"),
        (["-l", "a", "-l", "b", "--trunk", "hashing"], "", "cannot make heads from label names"),
    ],
)
def test_cli_bad_labels_are_one_line(
    tmp_path: Path, capsys: Any, args: list[str], content: str | bytes, message: str
) -> None:
    file = tmp_path / "labels.json"
    file.write_bytes(content if isinstance(content, bytes) else content.encode())
    args = [a.format(file=file, missing=tmp_path / "nope.json") for a in args]
    code, _, err = _run(capsys, "heads", "add", "h", "-b", tmp_path / "b", *args)
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "b" / "bundle.json").exists()


# -- the service ----------------------------------------------------------------------


@pytest.mark.heavy
def test_put_makes_a_head_from_names(tmp_path: Path, start_server: Any) -> None:
    b = Bundle(trunk="minilm", cache=None)
    b.add_head_from_labels("topic", TOPICS)
    b.save(tmp_path / "b")
    keys = tmp_path / "keys.txt"
    keys.write_text(f"{KEY}\n")
    srv = start_server(tmp_path / "b", "--api-key-file", str(keys))
    auth = {"Authorization": f"Bearer {KEY}"}
    body = {"labels": {"yes": "about sports and games", "no": None}, "kind": "binary"}
    res = httpx.put(srv.url + "/v1/heads/sporty", json=body, headers=auth)
    assert res.status_code == 200, res.text
    assert res.json()["heads"] == ["topic", "sporty"]
    res = httpx.post(srv.url + "/v1/predict", json={"texts": [TEXTS["sports"]]}, headers=auth)
    assert res.json()["results"][0]["sporty"]["label"] == "yes"
    assert Bundle.load(tmp_path / "b", cache=None).head_labels("sporty") == {
        "yes": "about sports and games",
        "no": "",
    }
    for bad, code in (
        ({"labels": 3}, "bad_labels"),
        ({"labels": ["a", "b"], "kind": "many"}, "bad_kind"),
        ({"labels": ["a"]}, None),
    ):
        res = httpx.put(srv.url + "/v1/heads/x", json=bad, headers=auth)
        assert 400 <= res.status_code < 500, res.text
        if code is not None:
            assert res.json()["error"]["code"] == code
    assert "needs at least two labels" in res.text
