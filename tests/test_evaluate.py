"""Metric arithmetic of ``manyheads.evaluate``: scikit-learn and hand-computed references.

What the code computes, as read from ``evaluate.py``:

* ``expected_calibration_error(confidence, correct, n_bins=15)``: equal-width bins
  ``[b / n_bins, (b + 1) / n_bins)`` with a confidence of exactly 1.0 in the last bin;
  ECE = sum over bins of ``|accuracy_b - mean confidence_b| * rows_b / rows``.
* ``head_metrics`` for ``multiclass`` and ``binary``: accuracy and F1s from ``y_pred``;
  macro F1 averages over the classes present in ``y_true`` or ``y_pred`` (so a class
  column of ``proba`` never seen in either is left out, a class never predicted scores
  0, and a target of -1 (unseen in training) is a class of its own with F1 0); ECE is
  on the top-label confidence ``proba.max(1)``, correct when ``proba.argmax(1)`` equals
  the target (the argmax, not ``y_pred``: for binary, that is ``max(p, 1 - p)`` of the
  positive-class probability, whatever threshold made ``y_pred``).
* ``head_metrics`` for ``multilabel``: exact-match accuracy, F1 over the label columns of
  the 0/1 matrices (``zero_division=0``), and ECE over every (row, label) pair as one
  binary prediction: confidence ``max(p, 1 - p)``, correct when ``(p >= 0.5) == y``.
* ``per_label_f1``: one F1 per label, multiclass over class indices ``0..len(labels)-1``.

None of the three functions validates its arguments itself; the last tests pin that
inconsistent lengths still raise (from scikit-learn / numpy) instead of giving a number.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score

from manyheads.evaluate import expected_calibration_error, head_metrics, per_label_f1


def _ref_ece(conf, correct, n_bins=15):
    """Loop over explicit bin edges, independent of the vectorised code."""
    conf = np.asarray(conf, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        mask = (conf >= lo) & ((conf < hi) if b < n_bins - 1 else (conf <= hi))
        if mask.any():
            gap = abs(correct[mask].mean() - conf[mask].mean())
            total += gap * mask.sum() / conf.size
    return total


def _proba(rng, n, k):
    return rng.dirichlet(np.full(k, 0.7), size=n)


def _sk_single_label(y_true, y_pred):
    return {
        "accuracy": accuracy_score(y_true, y_pred),
        "macro_f1": f1_score(y_true, y_pred, average="macro", zero_division=0),
        "micro_f1": f1_score(y_true, y_pred, average="micro", zero_division=0),
    }


def _assert_metrics(got, want):
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key


# -- scikit-learn on seeded random data -------------------------------------------


@pytest.mark.parametrize("kind,k", [("multiclass", 5), ("binary", 2)])
def test_single_label_matches_scikit_learn_on_random_data(kind, k):
    rng = np.random.default_rng(7)
    n = 300
    proba = _proba(rng, n, k)
    y_pred = proba.argmax(1)
    # about 60% right: the prediction, else a random class
    y_true = np.where(rng.random(n) < 0.6, y_pred, rng.integers(0, k, n))
    got = head_metrics(kind, y_true, y_pred, proba)
    assert got["n"] == n
    _assert_metrics(got, _sk_single_label(y_true, y_pred))
    assert got["micro_f1"] == pytest.approx(got["accuracy"])
    assert got["ece"] == pytest.approx(_ref_ece(proba.max(1), y_pred == y_true))
    assert set(got) == {"n", "accuracy", "macro_f1", "micro_f1", "ece"}


def test_multiclass_with_unseen_targets_matches_scikit_learn():
    """-1 (a class the head never saw) is always an error: micro F1 stays accuracy."""
    rng = np.random.default_rng(11)
    n, k = 200, 4
    proba = _proba(rng, n, k)
    y_pred = proba.argmax(1)
    y_true = np.where(rng.random(n) < 0.7, y_pred, rng.integers(0, k, n))
    y_true[rng.random(n) < 0.15] = -1
    assert (y_true == -1).sum() > 10
    got = head_metrics("multiclass", y_true, y_pred, proba)
    _assert_metrics(got, _sk_single_label(y_true, y_pred))
    assert got["accuracy"] == pytest.approx((y_true == y_pred).mean())
    assert got["micro_f1"] == pytest.approx(got["accuracy"])
    assert got["ece"] == pytest.approx(_ref_ece(proba.max(1), y_pred == y_true))


def test_multilabel_matches_scikit_learn_on_random_data():
    rng = np.random.default_rng(3)
    n, k = 250, 6
    proba = rng.random((n, k))
    y_true = (rng.random((n, k)) < proba).astype(int)  # calibrated-ish draws
    y_true[:20] = 0  # rows with no labels at all
    thresholds = np.array([0.5, 0.4, 0.6, 0.5, 0.3, 0.7])
    y_pred = (proba >= thresholds).astype(int)
    y_pred[:10] = 0
    got = head_metrics("multilabel", y_true, y_pred, proba)
    assert got["n"] == n
    want = {
        "accuracy": accuracy_score(y_true, y_pred),
        "macro_f1": f1_score(y_true, y_pred, average="macro", zero_division=0),
        "micro_f1": f1_score(y_true, y_pred, average="micro", zero_division=0),
    }
    _assert_metrics(got, want)
    # independent counts for the F1s and exact-match accuracy
    tp = ((y_true == 1) & (y_pred == 1)).sum(0)
    fp = ((y_true == 0) & (y_pred == 1)).sum(0)
    fn = ((y_true == 1) & (y_pred == 0)).sum(0)
    assert got["micro_f1"] == pytest.approx(2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()))
    assert got["macro_f1"] == pytest.approx(np.mean(2 * tp / (2 * tp + fp + fn)))
    assert got["accuracy"] == pytest.approx((y_true == y_pred).all(1).mean())
    # ECE: every (row, label) pair, the 0.5 cut rather than the tuned thresholds
    conf = np.maximum(proba, 1 - proba).ravel()
    hit = ((proba >= 0.5) == (y_true > 0)).ravel()
    assert got["ece"] == pytest.approx(_ref_ece(conf, hit))


def test_per_label_f1_matches_scikit_learn():
    rng = np.random.default_rng(5)
    y_true = rng.integers(0, 3, 100)  # class 3 never occurs, class 2 never predicted
    y_pred = rng.integers(0, 2, 100)
    got = per_label_f1("multiclass", y_true, y_pred, ["a", "b", "c", "d"])
    want = f1_score(y_true, y_pred, labels=[0, 1, 2, 3], average=None, zero_division=0)
    assert list(got) == ["a", "b", "c", "d"]
    assert list(got.values()) == pytest.approx(list(want))
    assert got["c"] == 0.0 and got["d"] == 0.0

    Y = (rng.random((80, 3)) < 0.4).astype(int)
    P = (rng.random((80, 3)) < 0.4).astype(int)
    got = per_label_f1("multilabel", Y, P, ["x", "y", "z"])
    want = f1_score(Y, P, average=None, zero_division=0)
    assert list(got) == ["x", "y", "z"]
    assert list(got.values()) == pytest.approx(list(want))


def test_per_label_f1_labels_are_stringified():
    got = per_label_f1("multiclass", np.array([0, 1]), np.array([0, 1]), [10, 20])
    assert got == {"10": 1.0, "20": 1.0}


# -- edge cases ------------------------------------------------------------------


def test_class_never_predicted_counts_and_absent_column_does_not():
    # y_true [0, 0, 1, 2], y_pred [0, 1, 1, 1], proba has 4 columns (class 3 absent).
    # class 0: tp 1 fp 0 fn 1 -> P 1,   R 1/2 -> F1 2/3
    # class 1: tp 1 fp 2 fn 0 -> P 1/3, R 1   -> F1 1/2
    # class 2: never predicted  -> F1 0 (in the average)
    # class 3: in neither array -> left out of the average
    # macro (2/3 + 1/2 + 0) / 3 = 7/18; micro = accuracy = 2/4.
    # ECE (15 bins): conf .9 right (bin 13), .5 wrong, .7 right (bin 10), .5 wrong (bin 7)
    #   -> (|1 - .9| + |1 - .7| + 2 * |0 - .5|) / 4 = 1.4 / 4 = 0.35
    y_true = np.array([0, 0, 1, 2])
    y_pred = np.array([0, 1, 1, 1])
    proba = np.array(
        [
            [0.90, 0.05, 0.03, 0.02],
            [0.30, 0.50, 0.10, 0.10],
            [0.10, 0.70, 0.10, 0.10],
            [0.20, 0.50, 0.20, 0.10],
        ]
    )
    got = head_metrics("multiclass", y_true, y_pred, proba)
    assert got == {
        "n": 4,
        "accuracy": pytest.approx(0.5),
        "macro_f1": pytest.approx(7 / 18),
        "micro_f1": pytest.approx(0.5),
        "ece": pytest.approx(0.35),
    }


def test_unseen_target_is_an_error_by_hand():
    # y_true [-1, 0, 1, 1], y_pred [0, 0, 1, 0]; 2 classes known to the head.
    # accuracy 2/4.  macro over {-1, 0, 1}:
    #   -1: tp 0 fn 1 -> 0;  0: tp 1 fp 2 -> P 1/3 R 1 -> 1/2;  1: tp 1 fn 1 -> 2/3
    #   -> (0 + 1/2 + 2/3) / 3 = 7/18.
    # micro: the -1 row is a false positive for class 0 and a false negative for -1,
    #   like any other error: tp 2, fp 2, fn 2 -> 1/2 (= accuracy).
    # ECE (15 bins): argmax [0, 0, 1, 0] with conf .85, .65, .95, .75 -> right only
    #   on rows 1 and 2 -> (.85 + .35 + .05 + .75) / 4 = 0.5
    y_true = np.array([-1, 0, 1, 1])
    y_pred = np.array([0, 0, 1, 0])
    proba = np.array([[0.85, 0.15], [0.65, 0.35], [0.05, 0.95], [0.75, 0.25]])
    got = head_metrics("multiclass", y_true, y_pred, proba)
    assert got["accuracy"] == pytest.approx(0.5)
    assert got["macro_f1"] == pytest.approx(7 / 18)
    assert got["micro_f1"] == pytest.approx(0.5)
    assert got["ece"] == pytest.approx(0.5)
    # per-label F1 over the known classes: -1 adds a false positive to class 0 only
    assert per_label_f1("multiclass", y_true, y_pred, ["a", "b"]) == {
        "a": pytest.approx(0.5),
        "b": pytest.approx(2 / 3),
    }


def test_all_targets_unseen_score_zero():
    proba = np.array([[0.8, 0.2], [0.3, 0.7]])
    got = head_metrics("multiclass", np.array([-1, -1]), np.array([0, 1]), proba)
    assert (got["accuracy"], got["macro_f1"], got["micro_f1"]) == (0.0, 0.0, 0.0)
    # conf .8 and .7, both wrong -> (.8 + .7) / 2
    assert got["ece"] == pytest.approx(0.75)


@pytest.mark.parametrize("kind,k", [("multiclass", 3), ("binary", 2)])
def test_all_correct_and_all_wrong(kind, k):
    y = np.arange(12) % k
    proba = np.eye(k)[y]  # confident and right: ECE 0
    right = head_metrics(kind, y, y, proba)
    assert right == {"n": 12, "accuracy": 1.0, "macro_f1": 1.0, "micro_f1": 1.0, "ece": 0.0}
    wrong_pred = (y + 1) % k
    wrong = head_metrics(kind, y, wrong_pred, np.eye(k)[wrong_pred])  # confident and wrong
    assert wrong == {"n": 12, "accuracy": 0.0, "macro_f1": 0.0, "micro_f1": 0.0, "ece": 1.0}


def test_single_row():
    proba = np.array([[0.2, 0.7, 0.1]])
    right = head_metrics("multiclass", np.array([1]), np.array([1]), proba)
    assert right == {
        "n": 1,
        "accuracy": 1.0,
        "macro_f1": 1.0,
        "micro_f1": 1.0,
        "ece": pytest.approx(0.3),
    }
    wrong = head_metrics("multiclass", np.array([2]), np.array([1]), proba)
    assert wrong == {
        "n": 1,
        "accuracy": 0.0,
        "macro_f1": 0.0,
        "micro_f1": 0.0,
        "ece": pytest.approx(0.7),
    }
    ml = head_metrics("multilabel", np.array([[1, 0]]), np.array([[1, 0]]), np.array([[0.9, 0.2]]))
    # label 1 is empty in both -> F1 0 (zero_division=0), so macro (1 + 0) / 2;
    # ECE pairs: conf .9 right, .8 right -> (.1 + .2) / 2
    assert ml == {
        "n": 1,
        "accuracy": 1.0,
        "macro_f1": 0.5,
        "micro_f1": 1.0,
        "ece": pytest.approx(0.15),
    }


@pytest.mark.parametrize("kind", ["multiclass", "binary", "multilabel"])
def test_no_rows_gives_only_n(kind):
    assert head_metrics(kind, np.array([]), np.array([]), np.zeros((0, 2))) == {"n": 0}


def test_multilabel_rows_without_labels():
    # Rows 0 and 1 have no labels and none are predicted: exact matches.
    # y_true [[0,0],[0,0],[1,0],[1,1]], y_pred [[0,0],[0,0],[1,0],[0,1]]
    # accuracy 3/4; label 0: tp 1 fn 1 -> 2/3; label 1: tp 1 -> 1; macro 5/6;
    # micro: tp 2 fp 0 fn 1 -> 4/5.
    y_true = np.array([[0, 0], [0, 0], [1, 0], [1, 1]])
    y_pred = np.array([[0, 0], [0, 0], [1, 0], [0, 1]])
    proba = np.array([[0.25, 0.25], [0.25, 0.25], [0.75, 0.25], [0.25, 0.75]])
    got = head_metrics("multilabel", y_true, y_pred, proba)
    assert got["accuracy"] == pytest.approx(0.75)
    assert got["macro_f1"] == pytest.approx(5 / 6)
    assert got["micro_f1"] == pytest.approx(0.8)
    # all 8 pairs have confidence .75; 7 right (row 3 label 0 wrong) -> |7/8 - .75|
    assert got["ece"] == pytest.approx(0.125)


def test_multilabel_no_labels_anywhere_documents_zero_division():
    """Current behaviour: with no positive anywhere, exact-match accuracy is 1 but the
    F1s are 0 (scikit-learn's ``zero_division=0``), and a label column that is empty in
    both matrices pulls macro F1 down (unlike multiclass, which leaves it out)."""
    empty = np.zeros((3, 2), dtype=int)
    got = head_metrics("multilabel", empty, empty, np.full((3, 2), 0.25))
    assert got == {
        "n": 3,
        "accuracy": 1.0,
        "macro_f1": 0.0,
        "micro_f1": 0.0,
        "ece": pytest.approx(0.25),
    }
    y = np.array([[1, 0], [0, 0]])  # label 1 never true nor predicted
    got = head_metrics("multilabel", y, y, np.array([[0.9, 0.1], [0.1, 0.1]]))
    assert (got["accuracy"], got["micro_f1"], got["macro_f1"]) == (1.0, 1.0, 0.5)


# -- ECE by hand -------------------------------------------------------------------


def test_ece_four_bins_by_hand():
    # bins [0, .25) [.25, .5) [.5, .75) [.75, 1]
    #   bin 0: .1 .2 wrong wrong  -> acc 0,  conf .15 -> .15 * 2/8 = .0375
    #   bin 1: .3 right           -> acc 1,  conf .3  -> .70 * 1/8 = .0875
    #   bin 2: .6 right, .7 wrong -> acc .5, conf .65 -> .15 * 2/8 = .0375
    #   bin 3: .8 .9 1.0 right    -> acc 1,  conf .9  -> .10 * 3/8 = .0375
    # total 0.2
    conf = np.array([0.1, 0.2, 0.3, 0.6, 0.7, 0.8, 0.9, 1.0])
    correct = np.array([0, 0, 1, 1, 0, 1, 1, 1], dtype=bool)
    assert expected_calibration_error(conf, correct, n_bins=4) == pytest.approx(0.2)
    # one bin: |5/8 - 4.6/8| = 0.05
    assert expected_calibration_error(conf, correct, n_bins=1) == pytest.approx(0.05)
    assert expected_calibration_error(conf, correct, n_bins=4) == pytest.approx(
        _ref_ece(conf, correct, n_bins=4)
    )


def test_ece_perfectly_calibrated_is_zero():
    # confidence .25: 1 of 4 right; .75: 3 of 4 right; 1.0: all right
    conf = np.repeat([0.25, 0.75, 1.0], [4, 4, 2])
    correct = np.array([1, 0, 0, 0, 1, 1, 0, 1, 1, 1])
    for n_bins in (2, 4, 10, 15):
        assert expected_calibration_error(conf, correct, n_bins=n_bins) == pytest.approx(0.0)


def test_ece_bins_do_not_cancel():
    # One bin under-confident, one over-confident: the gaps add, they do not cancel.
    # .2 right (gap .8) and .9 wrong (gap .9) -> (.8 + .9) / 2 with 10 bins; one bin:
    # |1/2 - 1.1/2| = .05
    conf = np.array([0.2, 0.9])
    correct = np.array([True, False])
    assert expected_calibration_error(conf, correct, n_bins=10) == pytest.approx(0.85)
    assert expected_calibration_error(conf, correct, n_bins=1) == pytest.approx(0.05)


def test_ece_of_nothing_is_zero():
    assert expected_calibration_error(np.array([]), np.array([])) == 0.0


def test_ece_matches_loop_reference_on_random_data():
    rng = np.random.default_rng(13)
    conf = rng.random(500)
    correct = rng.random(500) < conf**2
    for n_bins in (1, 3, 10, 15):
        assert expected_calibration_error(conf, correct, n_bins=n_bins) == pytest.approx(
            _ref_ece(conf, correct, n_bins=n_bins)
        )


def test_binary_ece_uses_top_label_of_argmax_not_the_threshold():
    # positive-class p: .85 .35 .05 .75; y_true [1, 1, 0, 0]
    # ECE: conf max(p, 1 - p) = .85 .65 .95 .75, argmax [1, 0, 0, 1]
    #   -> right, wrong, right, wrong -> (.15 + .65 + .05 + .75) / 4 = 0.4
    # y_pred from a tuned threshold .3: [1, 1, 0, 1] -> accuracy 3/4
    #   class 1: tp 2 fp 1 -> P 2/3 R 1 -> .8;  class 0: tp 1 fn 1 -> 2/3
    #   macro (.8 + 2/3) / 2 = 11/15; micro = accuracy
    p = np.array([0.85, 0.35, 0.05, 0.75])
    proba = np.column_stack([1 - p, p])
    y_true = np.array([1, 1, 0, 0])
    got = head_metrics("binary", y_true, (p >= 0.3).astype(int), proba)
    assert got == {
        "n": 4,
        "accuracy": pytest.approx(0.75),
        "macro_f1": pytest.approx(11 / 15),
        "micro_f1": pytest.approx(0.75),
        "ece": pytest.approx(0.4),
    }
    # same ECE whatever y_pred is
    assert head_metrics("binary", y_true, np.zeros(4, dtype=int), proba)["ece"] == pytest.approx(
        0.4
    )


def test_multilabel_ece_uses_every_label_probability():
    # y_true [[1,0],[0,0],[1,1]]; p [[.85,.35],[.45,.05],[.65,.25]]; y_pred = p >= .5
    # accuracy 2/3 (row 2 misses label 1); label 0 F1 1, label 1 F1 0 -> macro .5;
    # micro: tp 2 fp 0 fn 1 -> .8
    # ECE over 6 pairs, conf max(p, 1 - p), 15 bins:
    #   .85 right | .65 .65 right (p .35 with y 0, p .65 with y 1) | .55 right | .95 right
    #   | .75 wrong (p .25 with y 1)
    #   -> (.15 + 2 * .35 + .45 + .05 + .75) / 6 = 2.1 / 6 = 0.35
    y_true = np.array([[1, 0], [0, 0], [1, 1]])
    proba = np.array([[0.85, 0.35], [0.45, 0.05], [0.65, 0.25]])
    got = head_metrics("multilabel", y_true, (proba >= 0.5).astype(int), proba)
    assert got == {
        "n": 3,
        "accuracy": pytest.approx(2 / 3),
        "macro_f1": pytest.approx(0.5),
        "micro_f1": pytest.approx(0.8),
        "ece": pytest.approx(0.35),
    }


# -- bad inputs --------------------------------------------------------------------


def test_inconsistent_lengths_raise():
    proba = np.full((3, 2), 0.5)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        head_metrics("multiclass", np.array([0, 1, 1]), np.array([0, 1]), proba)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        head_metrics("multilabel", np.zeros((3, 2)), np.zeros((2, 2)), proba)
    with pytest.raises(ValueError, match="same length"):
        expected_calibration_error(np.array([0.5, 0.6]), np.array([True]))
