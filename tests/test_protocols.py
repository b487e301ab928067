"""Evaluation protocols: MTEB's classification protocol (checked against mteb's own
evaluator on the same vectors) and grouped k-fold of fresh heads; their bad settings."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from datasets import Dataset, DatasetDict
from mteb.mocks.mock_tasks.classification import MockClassificationTask
from mteb.models.abs_encoder import AbsEncoder
from sklearn.linear_model import LogisticRegression

from manyheads import Bundle, ConfigError, DataError
from manyheads.evaluate.protocols import kfold_scores, mteb_scores
from manyheads.heads.linear import LinearHead


def _blobs(n: int, labels: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, labels, n).tolist()
    centers = np.random.default_rng(99).normal(size=(labels, 16))
    return (centers[y] + rng.normal(scale=2.0, size=(n, 16))).astype(np.float32), y


def _mteb_itself(X_train, y_train, X_test, y_test) -> dict:
    """mteb's AbsTaskClassification on these vectors (an in-memory task, an encoder
    that returns them)."""
    train_texts = [f"train {i}" for i in range(len(y_train))]
    test_texts = [f"test {i}" for i in range(len(y_test))]
    vectors = dict(zip(train_texts + test_texts, np.vstack([X_train, X_test]), strict=True))

    class Task(MockClassificationTask):
        evaluator_model = LogisticRegression(max_iter=100)  # AbsTaskClassification's

        def load_data(self, num_proc=None, **kwargs):
            self.dataset = DatasetDict(
                {
                    "train": Dataset.from_dict({"text": train_texts, "label": y_train}),
                    "test": Dataset.from_dict({"text": test_texts, "label": y_test}),
                }
            )
            self.data_loaded = True

    class Fixed(AbsEncoder):
        def __init__(self):
            pass

        def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kw):
            return np.vstack([vectors[t] for batch in inputs for t in batch["text"]])

    return Task().evaluate(Fixed(), split="test", encode_kwargs={"batch_size": 64})["default"]


@pytest.mark.parametrize("labels", [3, 2])
def test_the_mteb_protocol_gives_mtebs_own_numbers(labels):
    X_train, y_train = _blobs(300, labels, seed=1)
    X_test, y_test = _blobs(150, labels, seed=2)
    theirs = _mteb_itself(X_train, y_train, X_test, y_test)
    ours = mteb_scores(X_train, y_train, X_test, y_test)
    assert (ours["k"], ours["experiments"], ours["labels_below_k"]) == (8, 10, 0)
    pairs = [("accuracy", "accuracy"), ("macro_f1", "f1"), ("weighted_f1", "f1_weighted")]
    if labels == 2:
        pairs.append(("average_precision", "ap"))
    for mine, name in pairs:
        assert ours[mine] == pytest.approx(theirs[name], abs=1e-6), name
        per_run = [s[name] for s in theirs["scores_per_experiment"]]
        assert [r[mine] for r in ours["runs"]] == pytest.approx(per_run, abs=1e-6)
    accuracies = [s["accuracy"] for s in theirs["scores_per_experiment"]]
    assert ours["accuracy_std"] == pytest.approx(np.std(accuracies), abs=1e-6)


def test_bundle_evaluate_runs_both_protocols_on_its_own_vectors(debian_rows, debian_test_rows):
    b = Bundle(trunk="hashing", cache=None)
    texts = [r["text"] for r in debian_rows]
    b.fit_head("library", texts, [r["library"] for r in debian_rows], kind="binary")
    b.fit_head("role", texts, [r["role"] for r in debian_rows], kind="multilabel")
    test_texts = [r["text"] for r in debian_test_rows]
    library = [r["library"] for r in debian_test_rows]
    got = b.evaluate(
        test_texts, {"library": library}, protocol="mteb", train_texts=texts,
        train_labels={"library": [r["library"] for r in debian_rows]}, experiments=3,
    )["library"]  # fmt: skip
    want = mteb_scores(
        b.embed(texts).toarray(), [r["library"] for r in debian_rows],
        b.embed(test_texts).toarray(), library, experiments=3,
    )  # fmt: skip
    assert got["accuracy"] == pytest.approx(want["accuracy"], abs=1e-9)
    assert got["kind"] == "binary" and len(got["runs"]) == 3
    seeded = b.evaluate(
        test_texts, {"library": library}, protocol="mteb", train_texts=texts,
        train_labels={"library": [r["library"] for r in debian_rows]}, experiments=3, seed=0,
    )["library"]  # fmt: skip
    other = mteb_scores(
        b.embed(texts).toarray(), [r["library"] for r in debian_rows],
        b.embed(test_texts).toarray(), library, experiments=3, seed=0,
    )  # fmt: skip
    assert seeded["runs"] == other["runs"] != got["runs"]  # seed 0 is a seed, not "unset"
    with pytest.raises(DataError, match="head 'library': 1500 train texts but 3 train labels"):
        b.evaluate(test_texts, {"library": library}, protocol="mteb", train_texts=texts,
                   train_labels={"library": ["no", "yes", "no"]})  # fmt: skip
    before = b.predict(test_texts[:20])
    groups = [r["group"] for r in debian_test_rows]
    labels = {"library": library, "role": [r["role"] for r in debian_test_rows]}
    folds = b.evaluate(test_texts, labels, protocol="kfold", folds=3, groups=groups)
    for name, kind in (("library", "binary"), ("role", "multilabel")):
        assert folds[name]["kind"] == kind and len(folds[name]["runs"]) == 3
        assert 0 < folds[name]["accuracy"] <= 1 and folds[name]["accuracy_std"] >= 0
        assert folds[name]["accuracy"] == pytest.approx(
            np.mean([r["accuracy"] for r in folds[name]["runs"]])
        )
    assert b.predict(test_texts[:20]) == before  # fresh heads: the bundle's are untouched


def test_kfold_keeps_each_group_in_one_fold():
    X, y = _blobs(120, 3, seed=3)
    groups = [i // 6 for i in range(120)]
    seen = []

    class Watching(LinearHead):
        def fit(self, X, y, **kw):
            seen.append(len(y))
            return super().fit(X, y, **kw)

    found = kfold_scores(lambda: Watching(), X, y, folds=4, groups=groups, seed=0)
    assert len(found["runs"]) == 4 and sum(r["n"] for r in found["runs"]) == 120
    assert all(r["n"] % 6 == 0 for r in found["runs"])  # whole groups of 6 held out


@pytest.mark.parametrize(
    ("protocol", "options", "message"),
    [
        ("best", {}, "protocol must be one of holdout, mteb, kfold, got 'best'"),
        ("holdout", {"k": 3}, "k is not a setting of protocol holdout"),
        ("kfold", {"train_texts": ["a b"]}, "train_texts is not a setting of protocol kfold"),
        ("kfold", {"report": "r"}, "report is for protocol holdout"),
        ("mteb", {}, "protocol mteb needs a train set: give train_texts"),
        ("kfold", {"folds": 0}, "folds must be a positive integer, got 0"),
    ],
)
def test_bad_protocol_settings_cost_no_trunk_pass(counting_trunk, protocol, options, message):
    b = Bundle(trunk=counting_trunk, cache=None)
    b.fit_head("t", ["a b", "c d", "e f", "g h"] * 3, ["x", "y"] * 6)
    calls = counting_trunk.calls
    with pytest.raises(ConfigError, match=message):
        b.evaluate(["a b", "c d"], {"t": ["x", "y"]}, protocol=protocol, **options)
    assert counting_trunk.calls == calls


def test_settings_that_cannot_be_met_are_one_line_errors(counting_trunk):
    b = Bundle(trunk=counting_trunk, cache=None)
    b.fit_head("t", ["a b", "c d", "e f", "g h"] * 3, ["x", "y"] * 6)
    b.fit_head("m", ["a b", "c d", "e f", "g h"] * 3, [["x"], ["y"]] * 6, kind="multilabel")
    with pytest.raises(ConfigError, match="protocol mteb scores single-label heads; head 'm'"):
        b.evaluate(["a b"], {"m": [["x"]]}, protocol="mteb", train_texts=["a"],
                   train_labels={"m": [["x"]]})  # fmt: skip
    X, y = _blobs(40, 2, seed=0)
    with pytest.raises(ConfigError, match=r"k is 30, but label '\d' has \d+ training rows"):
        mteb_scores(X, y, X, y, k=30)
    assert mteb_scores(X, y, X, y, experiments=2)["labels_below_k"] == 0
    with pytest.raises(ConfigError, match="folds is 5, but the rows have 3 groups"):
        kfold_scores(LinearHead, X, y, folds=5, groups=[i % 3 for i in range(40)])
    with pytest.raises(ConfigError, match="folds must be at least 2, got 1"):
        kfold_scores(LinearHead, X, y, folds=1)
    with pytest.raises(ConfigError, match="folds is 50, but there are 40 rows"):
        kfold_scores(LinearHead, X, y, folds=50)
    rare = ["a"] * 39 + ["b"]  # the fold holding "b" trains on "a" alone
    with pytest.raises(DataError, match="a fold's training rows: labels have a single class"):
        kfold_scores(partial(LinearHead, kind="binary"), X, rare, folds=5)
    b.fit_head("u", ["a b", "c d", "e f", "g h"] * 3, ["x", "y"] * 6)
    with pytest.raises(DataError, match="the train set has no labels for head 'u'"):
        b.evaluate(["a b"], {"u": ["x"]}, protocol="mteb", train_texts=["a b"],
                   train_labels={"t": ["x"]})  # fmt: skip


@pytest.mark.heavy  # figures drawn / bundles trained through the CLI
def test_the_command_prints_mean_and_spread(tmp_path, capsys):
    from conftest import TEST_FILE, TRAIN_FILE

    from manyheads.cli import main

    bundle = str(tmp_path / "b")
    assert main(["train", str(TRAIN_FILE), "-b", bundle, "--trunk", "hashing",
                 "-t", "library:binary"]) == 0  # fmt: skip
    capsys.readouterr()
    args = ["eval", str(TEST_FILE), "-b", bundle]
    assert (
        main([*args, "--protocol", "mteb", "--train", str(TRAIN_FILE), "--experiments", "2"]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["head", "kind", "runs", "accuracy", "macro_f1", "average_precision"]
    assert out[1].split()[:3] == ["library", "binary", "2"] and "±" in out[1]
    assert main([*args, "--protocol", "mteb"]) == 1
    assert capsys.readouterr().err.strip() == (
        "manyheads: error: --protocol mteb needs a train set: give --train FILE"
    )
    assert main([*args, "--protocol", "kfold", "--k", "4"]) == 1
    assert "--k is not a setting of --protocol kfold" in capsys.readouterr().err
