"""Fine-tuning a bundle's trunk end to end: CLI, refitting every head, moving the bundle."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import write_jsonl

from manyheads import Bundle, ConfigError
from manyheads.bundle import BUNDLE_JSON
from manyheads.cli import main

pytestmark = pytest.mark.heavy  # left out of scripts/test.sh --quick

pytest.importorskip("torch")


@pytest.fixture
def data_file(tmp_path: Path, debian_rows) -> Path:
    rows = [{k: r[k] for k in ("text", "section", "library", "group")} for r in debian_rows[:120]]
    return write_jsonl(tmp_path / "train.jsonl", rows)


def test_finetune_refits_every_head_and_drops_heads_without_data(
    capsys, tmp_path, data_file, tiny_model_dir, debian_rows
):
    bundle = tmp_path / "b"
    assert (
        main(
            [
                "train",
                str(data_file),
                "-b",
                str(bundle),
                "--trunk",
                str(tiny_model_dir),
                "--task",
                "section",
                "--task",
                "library:binary",
                "--group-field",
                "group",
            ]
        )
        == 0
    )
    b = Bundle.load(bundle)
    before = b.trunk_fingerprint
    rows = debian_rows[:40]
    b.fit_head(
        "nodata",
        [r["text"] for r in rows],
        [r["library"] for r in rows],
        kind="binary",
        keep_data=False,
    )
    b.save(bundle)
    capsys.readouterr()

    code = main(
        [
            "finetune",
            str(data_file),
            "-b",
            str(bundle),
            "--task",
            "section",
            "--epochs",
            "1",
            "--max-length",
            "32",
            "--batch-size",
            "8",
            "--group-field",
            "group",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "fine-tuned trunk" in out and "removed head 'nodata'" in err
    doc = json.loads((bundle / BUNDLE_JSON).read_text())
    spec = doc["trunk"]["spec"]
    assert spec["type"] == "transformer" and spec["path"].startswith("trunk-")
    assert (bundle / spec["path"] / "model.safetensors").is_file()
    assert doc["trunk"]["fingerprint"] != before
    assert set(doc["heads"]) == {"section", "library"}
    for record in doc["heads"].values():
        assert record["trunk_fingerprint"] == doc["trunk"]["fingerprint"]
    # the bundle folder can move: the trunk path is relative to it
    moved = tmp_path / "moved"
    shutil.move(str(bundle), moved)
    again = Bundle.load(moved, cache=None)
    answer = again.predict(["a python library"])[0]
    assert set(answer) == {"section", "library"}


def test_finetune_twice_keeps_only_the_current_trunk_folder(
    capsys, tmp_path, data_file, tiny_model_dir
):
    bundle = tmp_path / "b"
    main(
        [
            "train",
            str(data_file),
            "-b",
            str(bundle),
            "--trunk",
            str(tiny_model_dir),
            "--task",
            "section",
        ]
    )
    for _ in range(2):
        assert (
            main(
                [
                    "finetune",
                    str(data_file),
                    "-b",
                    str(bundle),
                    "--task",
                    "section",
                    "--epochs",
                    "1",
                    "--max-length",
                    "16",
                    "--batch-size",
                    "16",
                ]
            )
            == 0
        )
    assert len(list(bundle.glob("trunk-*"))) == 1
    capsys.readouterr()


def test_finetune_needs_a_transformer_trunk(capsys, tmp_path, data_file):
    bundle = tmp_path / "b"
    main(["train", str(data_file), "-b", str(bundle), "--trunk", "hashing", "--task", "section"])
    capsys.readouterr()
    code = main(["finetune", str(data_file), "-b", str(bundle), "--task", "section"])
    _, err = capsys.readouterr()
    assert code == 1
    assert "fine-tuning needs a trunk with exactly one transformer part" in err


def test_finetune_calibrates_heads_on_rows_the_trunk_did_not_see(
    tmp_path, tiny_model_dir, debian_rows
):
    rows = debian_rows[:100]
    texts = [r["text"] for r in rows]
    groups = [r["group"] for r in rows]
    b = Bundle(trunk=str(tiny_model_dir), cache=None)
    b.fit_head("section", texts, [r["section"] for r in rows], groups=groups)
    other = debian_rows[100:160]  # texts the fine-tuning never sees
    b.fit_head("library", [r["text"] for r in other], [r["library"] for r in other], kind="binary")
    tasks = {"section": ("multiclass", [r["section"] for r in rows])}

    def finetune(holdout: float):  # type: ignore[no-untyped-def]
        return b.finetune(
            texts,
            tasks,
            tmp_path / "b",
            groups=groups,
            epochs=1,
            max_length=32,
            batch_size=8,
            holdout=holdout,
        )

    summary = finetune(0.25)
    by_name = {s.name: s for s in summary.heads}
    section = by_name["section"]
    # fitted on the fine-tuned rows, calibrated on the held-out quarter, not refitted
    # (n_val counts the held-out rows whose class the train part has)
    assert 65 <= section.n_train <= 85 and section.n_train + section.n_val <= len(rows)
    assert "ece_cv" not in section.metrics
    assert "calibrated_on_trunk_training_rows" not in section.metrics
    # the kept data is still every row (for the next fine-tune)
    kept = b.training_data("section")
    assert kept is not None and sorted(kept[0]) == sorted(texts)
    # a head whose texts the trunk never saw is fitted as usual
    assert "ece_cv" not in by_name["library"].metrics
    assert by_name["library"].n_train + by_name["library"].n_val == len(other)
    # with no hold-out every row was seen by the trunk: calibrated on them, and said so
    again = finetune(0.0)
    flagged = {s.name: s.metrics for s in again.heads}
    assert flagged["section"]["calibrated_on_trunk_training_rows"] is True
    assert b.head_info["section"]["metrics"]["calibrated_on_trunk_training_rows"] is True
    with pytest.raises(ConfigError, match=r"holdout must be in \[0, 1\); got 1.5"):
        finetune(1.5)
