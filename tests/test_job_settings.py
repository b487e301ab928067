"""The settings of the jobs on a labelled file (how it is read, the cache) and of the
diagnosing and evaluating jobs: each option checked once, in one line naming it, before
the file is read; an option a job does not have is refused naming the ones it has."""

from __future__ import annotations

import json

import pytest

from manyheads import ConfigError
from manyheads.jobs import absorb_file, diagnose_file, evaluate_file
from manyheads.jobs.diagnose import DiagnoseSettings
from manyheads.jobs.evaluate import EvaluateSettings
from manyheads.jobs.file_settings import FileSettings


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"text_field": ""}, "text_field must be a non-empty string, got ''"),
        ({"group_field": ""}, "group_field must be a non-empty string or None, got ''"),
        ({"label_sep": 1}, "label_sep must be a non-empty string, got 1"),
        ({"no_cache": "yes"}, "no_cache must be true or false, got 'yes'"),
    ],
)
def test_file_settings_refuse_a_bad_option_in_one_line(options, message):
    for settings in (FileSettings, DiagnoseSettings, EvaluateSettings):
        with pytest.raises(ConfigError) as caught:
            settings.of(options)
        assert str(caught.value) == message


def test_file_settings_split_their_own_options_from_the_others():
    files, rest = FileSettings.split({"text_field": "body", "C": 2, "no_cache": True})
    assert (files.text_field, files.no_cache, files.label_sep) == ("body", True, ",")
    assert rest == {"C": 2}
    assert files.cache() is None and FileSettings().cache() == "default"


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [{"text": f"text {i}", "s": "ab"[i % 2]} for i in range(40)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sample": 0}, "sample must be a positive integer, got 0"),
        ({"k": True}, "k must be a positive integer, got True"),
        ({"seed": "1"}, "seed must be an integer, got '1'"),
        ({"threshold": 1.5}, r"threshold must be in \(0, 1\], got 1.5"),
        ({"progress": None}, "progress must be true or false, got None"),
        ({"label_sep": ""}, "label_sep must be a non-empty string, got ''"),
        ({"samples": 50}, "diagnose_file has no option 'samples'; known: text_field"),
    ],
)
def test_diagnose_file_refuses_a_bad_option_before_reading(tmp_path, options, message):
    missing = tmp_path / "none.jsonl"  # never read: the option is refused first
    with pytest.raises(ConfigError, match=message) as caught:
        diagnose_file(missing, tasks=["s"], trunks=["hashing"], **options)
    assert "\n" not in str(caught.value)


def test_diagnose_file_takes_settings_and_options_over_them(data):
    settings = DiagnoseSettings(sample=30, k=3, no_cache=True)
    got = diagnose_file(data, tasks=["s"], trunks=["hashing"], settings=settings, seed=1)
    assert (got["mode"], got["n"], got["k"], got["seed"]) == ("trunks", 30, 3, 1)
    same = diagnose_file(data, tasks=["s"], trunks=["hashing"], sample=30, k=3, seed=1,
                         no_cache=True)  # fmt: skip
    assert same["tasks"] == got["tasks"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"folds": 0}, "folds must be a positive integer, got 0"),
        ({"experiments": 2.5}, "experiments must be a positive integer, got 2.5"),
        ({"seed": -1}, "seed must be an integer >= 0 or None, got -1"),
        ({"tier": "64"}, "tier must be an integer, got '64'"),
        ({"text_field": None}, "text_field must be a non-empty string, got None"),
        ({"fold": 5}, "evaluate_file has no option 'fold'; known: text_field"),
    ],
)
def test_evaluate_file_refuses_a_bad_option_before_opening_anything(tmp_path, options, message):
    with pytest.raises(ConfigError, match=message) as caught:
        evaluate_file(tmp_path / "none.jsonl", tmp_path / "no-bundle", **options)
    assert "\n" not in str(caught.value)


def test_evaluate_settings_give_the_protocol_its_own_settings():
    settings = EvaluateSettings(protocol="kfold", folds=3, seed=None)
    assert settings.protocol_settings() == {"folds": 3}
    assert EvaluateSettings.merged(settings, {"seed": 2}).protocol_settings() == {
        "folds": 3,
        "seed": 2,
    }


def test_absorb_file_checks_how_its_files_are_read(tmp_path):
    with pytest.raises(ConfigError, match="text_field must be a non-empty string, got ''"):
        absorb_file(tmp_path / "none.jsonl", tmp_path / "b", ["a=x"], text_field="")
