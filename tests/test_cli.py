from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEST_FILE, write_jsonl

from manyheads.cli import main


@pytest.fixture
def data_file(tmp_path: Path, debian_rows) -> Path:
    rows = [
        {k: r[k] for k in ("text", "section", "library", "role", "group")}
        for r in debian_rows[:500]
    ]
    return write_jsonl(tmp_path / "train.jsonl", rows)


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _train(capsys, data_file, bundle, *extra):
    return run(
        capsys,
        "train",
        data_file,
        "-b",
        bundle,
        "--trunk",
        "hashing",
        "--group-field",
        "group",
        *extra,
    )


@pytest.mark.heavy
def test_train_list_eval_predict_rm(capsys, tmp_path, data_file):
    bundle = tmp_path / "b"
    code, out, err = _train(
        capsys,
        data_file,
        bundle,
        "--task",
        "section",
        "--task",
        "library:binary",
        "--task",
        "role:multilabel",
        "--task",
        "sec=section:multiclass",
    )
    assert code == 0, err
    header = out.splitlines()[0].split()
    assert header[:5] == ["head", "kind", "classes", "train", "val"]
    assert "val_acc" in header and "seconds" in header
    assert [line.split()[0] for line in out.splitlines()[1:5]] == [
        "section",
        "library",
        "role",
        "sec",
    ]

    code, out, _ = run(capsys, "heads", "list", "-b", bundle)
    assert code == 0 and "sec" in out and "multilabel" in out

    code, out, err = run(capsys, "eval", data_file, "-b", bundle, "--json")
    assert code == 0, err
    doc = json.loads(out)  # exactly one JSON object
    assert set(doc) == {"heads"}
    assert set(doc["heads"]) == {"section", "library", "role", "sec"}
    for metrics in doc["heads"].values():
        assert {"kind", "n", "accuracy", "macro_f1", "micro_f1", "ece"} <= set(metrics)
    assert (
        doc["heads"]["sec"]["accuracy"] == doc["heads"]["section"]["accuracy"]
    )  # sec read 'section'

    code, out, _ = run(
        capsys,
        "predict",
        "-b",
        bundle,
        "--heads",
        "section,role",
        "A Python library for XML",
        "Fonts for the web",
    )
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(lines) == 2 and set(lines[0]) == {"section", "role"}

    code, out, _ = run(capsys, "heads", "rm", "sec", "-b", bundle)
    assert code == 0
    code, out, _ = run(capsys, "heads", "list", "-b", bundle, "--json")
    assert [r["name"] for r in json.loads(out)] == ["section", "library", "role"]


@pytest.mark.heavy
def test_training_into_existing_bundle_replaces_only_named_heads(capsys, tmp_path, data_file):
    bundle = tmp_path / "b"
    assert (
        _train(capsys, data_file, bundle, "--task", "section", "--task", "library:binary")[0] == 0
    )
    before = json.loads((bundle / "bundle.json").read_text())
    assert _train(capsys, data_file, bundle, "--task", "library:binary", "--C", "4")[0] == 0
    after = json.loads((bundle / "bundle.json").read_text())
    assert after["heads"]["section"] == before["heads"]["section"]
    assert after["heads"]["library"]["params"]["C"] == 4.0


@pytest.mark.heavy
def test_eval_skips_heads_whose_field_is_absent(capsys, tmp_path, data_file):
    bundle = tmp_path / "b"
    _train(capsys, data_file, bundle, "--task", "section", "--task", "role:multilabel")
    partial = write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"text": "python xml library", "section": "python"},
            {"text": "fonts", "section": "fonts"},
        ],
    )
    code, out, err = run(capsys, "eval", partial, "-b", bundle, "--json")
    assert code == 0
    assert list(json.loads(out)["heads"]) == ["section"]
    assert "skipped head 'role'" in err and "no field 'role'" in err


@pytest.mark.heavy
def test_predict_from_input_files(capsys, tmp_path, data_file):
    bundle = tmp_path / "b"
    _train(capsys, data_file, bundle, "--task", "section")
    plain = tmp_path / "t.txt"
    plain.write_text("first text\nsecond text\nthird\n")
    code, out, _ = run(capsys, "predict", "-b", bundle, "--input", plain)
    assert code == 0 and len(out.splitlines()) == 3
    code, out, _ = run(capsys, "predict", "-b", bundle, "--input", TEST_FILE)
    assert code == 0 and len(out.splitlines()) == 1000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--task", "section:regression"],
            "bad --task 'section:regression': kind must be one of multiclass, binary, multilabel, hierarchical, got 'regression'",
        ),
        (["--task", "=section"], "bad --task '=section': expected NAME[=FIELD]"),
        (["--task", "bad name"], "invalid head name 'bad name'"),
        (["--task", "missing"], "no field 'missing' for head 'missing'"),
        (["--task", "section", "--task", "section"], "--task names must be unique"),
        (["--task", "section", "--text-field", "body"], "missing text field 'body'"),
        (["--task", "section", "--trunk", "nope"], "unknown trunk 'nope'"),
        (["--task", "section", "--C", "-2"], "--C must be a positive number or 'auto', got '-2'"),
        (
            ["--task", "section", "--C", "lots"],
            "--C must be a positive number or 'auto', got 'lots'",
        ),
        (
            ["--task", "section", "--class-weight", "heavy"],
            "--class-weight must be None, 'balanced' or a dict, got 'heavy'",
        ),
        (
            ["--task", "section", "--head", "forest"],
            "--head must be one of linear, mlp, tree, auto",
        ),
        (["--task", "section", "--head", "tree", "--beam", "0"], "--beam must be an integer >= 1"),
        (
            ["--task", "section", "--head", "tree", "--precision", "int2"],
            "--precision must be one of float16, int8, int4, got 'int2'",
        ),
        (
            ["--task", "section", "--head", "tree", "--trees", "9"],
            "--trees must be 'auto' or an integer from 1 to 8, got '9'",
        ),
        (
            ["--task", "section", "--thresholds", "recall"],
            "--thresholds must be one of f1, f0.5, accuracy, got 'recall'",
        ),
        (
            ["--task", "section", "--part-weights", "some"],
            "--part-weights must be one of fixed, auto, got 'some'",
        ),
        (
            ["--task", "section", "--val-fraction", "2"],
            "--val-fraction must be a number in [0, 1), got 2.0",
        ),
    ],
)
def test_train_user_errors_exit_1_with_one_line(capsys, tmp_path, data_file, args, message):
    bundle = tmp_path / "b"
    code, _, err = run(capsys, "train", data_file, "-b", bundle, "--trunk", "hashing", *args)
    assert code == 1
    assert err.startswith("manyheads: error: ") and message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not bundle.exists() or not (bundle / "bundle.json").exists()


@pytest.mark.heavy
def test_invalid_input_writes_nothing_to_existing_bundle(capsys, tmp_path, data_file):
    bundle = tmp_path / "b"
    _train(capsys, data_file, bundle, "--task", "section")
    before = (bundle / "bundle.json").read_bytes(), (bundle / "heads.safetensors").read_bytes()
    bad = write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {"text": "fine", "section": "a", "group": "1"},
            {"text": "", "section": "b", "group": "2"},
        ],
    )
    code, _, err = run(capsys, "train", bad, "-b", bundle, "--task", "section")
    assert code == 1 and "bad.jsonl line 2: field 'text' is empty" in err
    one_class = write_jsonl(
        tmp_path / "one.jsonl",
        [{"text": f"t{i}", "section": "a", "group": str(i)} for i in range(10)],
    )
    code, _, err = run(
        capsys, "train", one_class, "-b", bundle, "--task", "section", "--task", "other=section"
    )
    assert code == 1 and "head 'section': labels have a single class ('a')" in err
    after = (bundle / "bundle.json").read_bytes(), (bundle / "heads.safetensors").read_bytes()
    assert before == after


@pytest.mark.heavy
def test_other_user_errors(capsys, tmp_path, data_file):
    bundle = tmp_path / "b"
    _train(capsys, data_file, bundle, "--task", "section")
    cases = [
        (["predict", "-b", bundle], "nothing to predict"),
        (["predict", "x", "-b", tmp_path / "nobundle"], "no bundle at"),
        (["predict", "x", "-b", bundle, "--heads", "nope"], "unknown head 'nope'"),
        (["heads", "rm", "nope", "-b", bundle], "unknown head 'nope'"),
        (["eval", tmp_path / "missing.jsonl", "-b", bundle], "no such file"),
        (
            ["train", data_file, "-b", bundle, "--task", "x=section", "--trunk", "minilm"],
            "uses trunk 'hashing'",
        ),
        (["train", data_file, "-b", data_file, "--task", "section"], "is not a bundle"),
    ]
    for args, message in cases:
        code, _, err = run(capsys, *args)
        assert code == 1, args
        assert message in err and "Traceback" not in err, (args, err)
    eval_missing = write_jsonl(tmp_path / "nolabels.jsonl", [{"text": "a"}])
    code, _, err = run(capsys, "eval", eval_missing, "-b", bundle)
    assert code == 1 and "has none of the heads' label fields (section)" in err


def test_usage_errors_exit_2(capsys):
    code, _, err = run(capsys, "train")
    assert code == 2 and "Missing argument" in err


@pytest.mark.heavy
def test_console_script_runs_in_a_real_process(tmp_path, data_file):
    env = {**os.environ, "MANYHEADS_CACHE_DIR": str(tmp_path / "cache")}
    exe = [sys.executable, "-m", "manyheads.cli"]
    subprocess.run(
        [
            *exe,
            "train",
            str(data_file),
            "-b",
            str(tmp_path / "b"),
            "--trunk",
            "hashing",
            "--task",
            "section",
        ],
        check=True,
        capture_output=True,
        env=env,
    )
    done = subprocess.run(
        [*exe, "predict", "-b", str(tmp_path / "b"), "a python library"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0 and json.loads(done.stdout)["section"]["label"]
    bad = subprocess.run(
        [*exe, "eval", str(tmp_path / "none.csv"), "-b", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 1 and bad.stderr.startswith("manyheads: error: cannot read")
    assert "Traceback" not in bad.stderr


@pytest.mark.heavy
@pytest.mark.minilm
def test_train_defaults_to_minilm_tfidf_auto_C_accuracy_thresholds(capsys, tmp_path, debian_rows):
    rows = [{k: r[k] for k in ("text", "section", "role")} for r in debian_rows[:150]]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    bundle = tmp_path / "b"
    code, _, err = run(
        capsys, "train", data, "-b", bundle, "--task", "section", "--task", "role:multilabel"
    )
    assert code == 0, err
    doc = json.loads((bundle / "bundle.json").read_text())
    assert doc["trunk"]["name"] == "minilm+tfidf"
    assert doc["trunk"]["spec"]["type"] == "composite"
    assert doc["heads"]["section"]["params"]["C"] == "auto"
    assert doc["heads"]["role"]["params"]["thresholds"] == "accuracy"


def test_predict_answers_empty_text_with_no_label(capsys):
    code, out, err = run(capsys, "predict", "", "   ")
    assert code == 0, err
    for line in out.splitlines():
        answer = json.loads(line)
        assert answer["risk"] == {"labels": [], "scores": {}}
        assert answer["kind"]["label"] is None and answer["language"]["label"] is None


def test_predict_input_answers_blank_lines_with_no_label_and_reads_folders(capsys, tmp_path):
    plain = tmp_path / "t.txt"
    plain.write_text("def f(): return 1\n\nDer Hund schläft.\n", encoding="utf-8")
    code, out, err = run(capsys, "predict", "--input", plain, "--heads", "kind")
    assert code == 0, err
    answers = [json.loads(line)["kind"] for line in out.splitlines()]
    assert [a["label"] is None for a in answers] == [False, True, False]
    folder = tmp_path / "in"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [{"text": "SELECT 1;"}, {"text": ""}])
    write_jsonl(folder / "b.jsonl", [{"text": "hello"}])
    code, out, err = run(capsys, "predict", "--input", folder, "--heads", "kind")
    assert code == 0, err
    assert [json.loads(line)["kind"]["label"] is None for line in out.splitlines()] == [
        False, True, False,
    ]  # fmt: skip
    (folder / "c.jsonl").write_text('{"text": 5}\n', encoding="utf-8")
    code, _, err = run(capsys, "predict", "--input", folder)
    assert (
        code == 1
        and err
        == "manyheads: error: "
        + f"{folder / 'c.jsonl'} line 1: field 'text' is int, expected a string\n"
    )


def test_progress_off_a_terminal_is_a_few_lines_for_a_stage_that_takes_a_while(monkeypatch):
    import io
    import time

    from manyheads import _progress

    monkeypatch.setattr(_progress, "LINE_AFTER", 0.2)
    monkeypatch.setattr(_progress, "LINE_EVERY", 0.3)
    err = io.StringIO()
    monkeypatch.setattr(_progress.sys, "stderr", err)
    with _progress.progress_bar(total=3, desc="quick") as bar:
        bar.update(3)
    assert err.getvalue() == ""  # over before it was worth a line
    with _progress.progress_bar(total=2, desc="training heads") as bar:
        bar.set_postfix_str("section")
        time.sleep(0.6)
        bar.update()
        bar.set_postfix_str("library")
        bar.update()
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("training heads: section (1/2), 0/2 after ")
    assert "training heads: library (2/2)" in lines
    assert lines[-1].startswith("training heads: done, 2/2 in ")
    with pytest.raises(KeyError, match="stop"), _progress.progress_bar(total=None, desc="e") as bar:
        time.sleep(0.3)
        raise KeyError("stop")
    assert err.getvalue().splitlines()[-1].startswith("e: stopped, 0 in ")


def test_version(capsys):
    import manyheads

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"manyheads {manyheads.__version__}\n"


@pytest.mark.heavy
def test_one_name_for_one_trunk(capsys, tmp_path, data_file):
    """A trunk is stored under the name it is given by (tfidf, a+b, a@1+b@0.5), a retrain
    naming it again is accepted, and a bundle that wrote the tfidf preset as "hashing"
    reads back as "tfidf"."""
    from manyheads import Bundle

    bundle = tmp_path / "b"
    _train(capsys, data_file, bundle, "--task", "section", "--trunk", "tfidf")
    doc = json.loads((bundle / "bundle.json").read_text())
    assert doc["trunk"]["name"] == "tfidf"
    _train(capsys, data_file, bundle, "--task", "again=section", "--trunk", "tfidf")
    assert set(Bundle.load(bundle, cache=None).heads) == {"section", "again"}
    code, _, err = run(
        capsys, "train", data_file, "-b", bundle, "--task", "x=section", "--trunk", "hashing"
    )
    assert code == 1 and "uses trunk 'tfidf'" in err
    doc["trunk"]["name"] = "hashing"  # as bundles of earlier versions wrote it
    (bundle / "bundle.json").write_text(json.dumps(doc))
    assert Bundle.load(bundle, cache=None).trunk_name == "tfidf"
    assert Bundle(trunk="hashing+tfidf@0.5", cache=None).trunk_name == "hashing@1+tfidf@0.5"
    assert Bundle(trunk={"type": "hashing", "dim": 512}, cache=None).trunk_name == "hashing"


@pytest.mark.heavy
def test_predict_on_a_terminal_is_compact_json_when_asked(capsys, monkeypatch, tmp_path, data_file):
    bundle = tmp_path / "b"
    _train(capsys, data_file, bundle, "--task", "section", "--task", "role:multilabel")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, err = run(capsys, "predict", "-b", bundle, "a python library", "", "x" * 80)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith('  1  "a python library"') and "section: " in lines[0]
    assert "role: " in lines[0] and "{" not in lines[0]
    assert "section: -" in lines[1] and "role: -" in lines[1]  # empty text: no answer
    assert '"' + "x" * 37 + '..."' in lines[2]
    for args in (["--json"], ["--scores", "all"]):
        code, out, _ = run(capsys, "predict", "-b", bundle, "a python library", *args)
        assert set(json.loads(out)) == {"section", "role"}
    code, out, _ = run(capsys, "predict", "-b", bundle, "a python library", "--scores", "top")
    top = json.loads(out)
    for answer in top.values():
        values = list(answer["scores"].values())
        assert 1 <= len(values) <= 5 and values == sorted(values, reverse=True)
    assert top["section"]["label"] == next(iter(top["section"]["scores"]))
    code, out, _ = run(capsys, "predict", "-b", bundle, "a python library", "--scores", "none")
    none = json.loads(out)
    assert "scores" not in none["section"] and "score" in none["section"]
    assert set(none["role"]) == {"labels"}
    code, _, err = run(capsys, "predict", "-b", bundle, "x", "--scores", "best")
    assert code == 1 and "scores must be one of all, top, none, got 'best'" in err


def test_help_fits_80_columns_and_names_values(monkeypatch, capsys):
    """Every description is wrapped whole at 80 columns (nothing cut off with '…'), and
    option values are named (--bundle BUNDLE), not typed (<bool>, <str>)."""
    monkeypatch.setenv("COLUMNS", "80")
    commands = ["train", "finetune", "eval", "predict", "export", "copy", "serve"]
    for command in [[c] for c in commands] + [["heads", "rm"], ["heads", "list"], []]:
        code, out, _ = run(capsys, *command, "--help")
        assert code == 0, command
        assert "…" not in out and "<bool>" not in out, (command, out)
        options = [line for line in out.splitlines() if line.lstrip().startswith("-")]
        assert not [line for line in options if "<" in line.split("  ")[1]], (command, out)
        assert max(len(line) for line in out.splitlines()) <= 80, command
    _, out, _ = run(capsys, "train", "--help")
    assert "NAME[=FIELD][:KIND]" in out and "--val-fraction VAL_FRACTION" in out
    assert "--no-cache " in out and "--seed SEED" in out


def test_a_head_that_fails_in_train_stops_its_progress_lines(
    monkeypatch, capsys, data_file, tmp_path
):
    import threading
    import time

    from manyheads import Bundle, _progress
    from manyheads.errors import DataError

    monkeypatch.setattr(_progress, "LINE_AFTER", 0.1)
    monkeypatch.setattr(_progress, "LINE_EVERY", 0.1)

    def fail(self, name, *args, **kwargs):
        time.sleep(0.3)  # long enough to have said a line
        raise DataError(f"head {name!r}: failed on purpose")

    monkeypatch.setattr(Bundle, "fit_head", fail)
    before = threading.active_count()
    code = main(
        [
            "train",
            str(data_file),
            "-b",
            str(tmp_path / "b"),
            "--task",
            "section",
            "--trunk",
            "hashing",
        ]
    )
    err = capsys.readouterr().err
    assert code == 1 and "failed on purpose" in err, err
    assert "training heads: stopped, 0/1 in " in err, err
    time.sleep(0.3)  # a bar left running would say more by now
    assert capsys.readouterr().err == ""
    assert threading.active_count() <= before


def test_train_truncate_shapes_a_new_bundle_s_trunk_only(
    capsys, tmp_path, tiny_st_dir, debian_rows
):
    """``--truncate TOKENS``: a new bundle's transformer parts read a text's first TOKENS
    tokens; a bundle that has its trunk, a byte trunk and a trunk without a transformer
    refuse it in one line."""
    rows = [{k: r[k] for k in ("text", "section", "library")} for r in debian_rows[:120]]
    data_file = write_jsonl(tmp_path / "small.jsonl", rows)
    bundle = tmp_path / "cut"
    code, _, err = run(
        capsys, "train", data_file, "-b", bundle, "-t", "section", "--trunk",
        f"{tiny_st_dir}+hashing", "--truncate", "12", "--C", "1",
    )  # fmt: skip
    assert code == 0, err
    spec = json.loads((bundle / "bundle.json").read_text())["trunk"]["spec"]
    assert spec["parts"][0]["overflow"] == "truncate" and spec["parts"][0]["max_length"] == 12
    code, _, err = run(
        capsys, "train", data_file, "-b", bundle, "-t", "library", "--truncate", "12"
    )
    assert code != 0 and "--truncate shapes the trunk of a new bundle" in err
    assert len(err.strip().splitlines()) == 1
    for trunk, message in (
        ("hashing", "--truncate: trunk 'hashing' has no part that reads text in token windows"),
        ("byte", "--truncate is for transformer trunks, not --trunk byte"),
    ):
        code, _, err = run(
            capsys, "train", data_file, "-b", tmp_path / f"new-{trunk}", "-t", "section",
            "--trunk", trunk, "--truncate", "12",
        )  # fmt: skip
        assert code != 0 and message in err, err
        assert not (tmp_path / f"new-{trunk}").exists()
