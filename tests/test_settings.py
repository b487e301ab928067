"""Settings objects: each option checked once, when the object is made, one line naming
it; an option a function does not have is refused naming the ones it has."""

from __future__ import annotations

import pytest

import manyheads
from manyheads import ConfigError
from manyheads.absorb.absorb import AbsorbSettings
from manyheads.jobs.train import TrainSettings
from manyheads.label import LabelSettings, label_file
from manyheads.train.settings import FitSettings


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"val_fraction": 1.0}, "val_fraction must be a number in [0, 1), got 1.0"),
        ({"C": 0}, "C must be a positive number or 'auto', got 0"),
        ({"C": True}, "C must be a positive number or 'auto', got True"),
        ({"thresholds": "recall"}, "thresholds must be one of f1, f0.5, accuracy, got 'recall'"),
        ({"head": "svm"}, "head must be one of linear, mlp, tree, auto, got 'svm'"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"path_sep": " "}, "path_sep must be a non-empty string without spaces, got ' '"),
        ({"refit": "yes"}, "refit must be true, false or None, got 'yes'"),
        ({"part_weights": "some"}, "part_weights must be one of fixed, auto, got 'some'"),
        ({"c": 1.0}, "fit_head has no option 'c'; known: val_fraction, refit, field, C"),
    ],
)
def test_fit_settings_refuse_a_bad_option_in_one_line(options, message):
    with pytest.raises(ConfigError) as caught:
        FitSettings.of(options, "fit_head")
    assert str(caught.value).startswith(message)


def test_fit_head_takes_settings_and_options_over_them(counting_trunk):
    texts = ["a library for XML", "a tool for fonts", "a game of cards"] * 6
    labels = ["lib", "tool", "game"] * 6
    bundle = manyheads.Bundle(trunk=counting_trunk, cache=None)
    settings = FitSettings(val_fraction=0.25, seed=3, keep_data=False)
    summary = bundle.fit_head("kind", texts, labels, settings=settings, field="topic")
    assert bundle.head_info["kind"]["field"] == "topic" and summary.n_train + summary.n_val == 18
    assert bundle.training_data("kind") is None  # keep_data=False
    calls = counting_trunk.calls
    with pytest.raises(ConfigError, match="fit_head has no option 'c'"):
        bundle.fit_head("kind", texts, labels, settings=settings, c=2)
    assert counting_trunk.calls == calls  # refused before any text reached the trunk


def test_the_other_jobs_refuse_an_option_they_do_not_have(tmp_path):
    with pytest.raises(ConfigError, match="label_file has no option 'batchsize'; known: heads"):
        label_file(tmp_path / "in.jsonl", "content", tmp_path / "out.jsonl", batchsize=8)
    with pytest.raises(ConfigError, match="absorb_teachers has no option 'tmp'"):
        AbsorbSettings.merged(None, {"tmp": 2}, "absorb_teachers")
    with pytest.raises(ConfigError, match=r"heldout must be in \(0, 0.5\), got 0.5"):
        AbsorbSettings(heldout=0.5)
    with pytest.raises(ConfigError, match="trunk_epochs must be a positive integer, got 0"):
        TrainSettings.of_options({"trunk_epochs": 0})
    with pytest.raises(ConfigError, match="train_report has no option 'epochs'"):
        TrainSettings.of_options({"epochs": 2})
    merged = LabelSettings.merged(LabelSettings(batch_size=8), {"scores": "all"})
    assert (merged.batch_size, merged.scores) == (8, "all")
