"""A bundle that keeps learning: corrections kept durably, guarded updates, history and
rollback, in the library and on the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import write_jsonl

from manyheads import Bundle
from manyheads.bundle.feedback import FEEDBACK_FILE, FeedbackFullError, FeedbackLimits
from manyheads.cli import main
from manyheads.errors import BundleError, ConfigError, DataError
from manyheads.heads.linear import LinearHead
from manyheads.learn.update import _held

OLD = ("libs", "utils", "devel", "doc")


def _split(rows: list[dict[str, Any]]) -> tuple[list, list]:
    old = [r for r in rows if r["section"] in OLD]
    new = [r for r in rows if r["section"] not in OLD]
    return old, new


@pytest.fixture
def folder(tmp_path: Path, debian_rows: list[dict[str, Any]]) -> Path:
    """A saved bundle whose multiclass ``section`` head knows four sections only."""
    old, _ = _split(debian_rows)
    bundle = Bundle("hashing")
    bundle.fit_head("section", [r["text"] for r in old], [r["section"] for r in old])
    bundle.fit_head("library", [r["text"] for r in old], [r["library"] for r in old], "binary")
    bundle.save(tmp_path / "b")
    return tmp_path / "b"


def _log(folder: Path) -> list[dict[str, Any]]:
    path = folder / FEEDBACK_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _answers(bundle: Bundle, texts: list[str]) -> str:
    return json.dumps(bundle.predict(texts), sort_keys=True)


# -- corrections ----------------------------------------------------------------------


def test_feedback_is_kept_counted_and_durable(folder: Path, debian_rows: list) -> None:
    bundle = Bundle.load(folder)
    _, new = _split(debian_rows)
    texts = [r["text"] for r in new[:30]]
    labels = [r["section"] for r in new[:30]]
    kept = bundle.add_feedback(texts, {"section": labels, "library": [None] * 29 + ["yes"]})
    assert kept == {"section": 30, "library": 1}
    rows = _log(folder)
    assert [r["id"] for r in rows] == list(range(1, 31))
    assert rows[0]["labels"] == {"section": labels[0]}
    assert rows[-1]["labels"] == {"section": labels[-1], "library": "yes"}
    counts = Bundle.load(folder).feedback_counts()
    assert counts["section"] == {"total": 30, "pending": 30, "new": 30}
    # a writer killed mid-line left half a row: never acknowledged, never read, cut off
    with open(folder / FEEDBACK_FILE, "ab") as fh:
        fh.write(b'{"id": 31, "text": "half a ro')
    assert len(bundle.feedback_rows()) == 30
    bundle.add_feedback(["one more text"], {"section": ["games"]})
    assert [r["id"] for r in _log(folder)][-2:] == [30, 31]


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (
            {"nope": ["libs"]},
            "feedback names unknown head 'nope'; the bundle has: section, library",
        ),
        ({"section": [["libs"]]}, "head 'section': label #0 is ['libs']; a multiclass head takes"),
        ({"library": ["maybe"]}, "head 'library': label 'maybe' is not one of its labels"),
        ({"section": ["libs", "utils"]}, "head 'section': 2 feedback labels for 1 texts"),
        ({"section": [None]}, "no feedback rows with a label"),
        ({"section": [float("nan")]}, "head 'section': label #0"),
        ({}, "feedback needs labels"),
    ],
)
def test_bad_feedback_is_one_line_and_writes_nothing(
    folder: Path, labels: dict, message: str
) -> None:
    with pytest.raises(DataError) as err:
        Bundle.load(folder).add_feedback(["a text"], labels)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (folder / FEEDBACK_FILE).exists()


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([""], "feedback text #0 is empty"),
        (["\ud800 lone"], "feedback text #0 is not valid Unicode"),
        (["x" * 101], "feedback text #0 is longer than 100 characters"),
        ("one text", "feedback texts must be a list of strings"),
        ([3], "feedback text #0 is int, not a string"),
    ],
)
def test_bad_feedback_texts(folder: Path, texts: Any, message: str) -> None:
    with pytest.raises(DataError, match=message):
        Bundle.load(folder).add_feedback(
            texts, {"section": ["libs"]}, limits=FeedbackLimits(max_chars=100)
        )
    assert not (folder / FEEDBACK_FILE).exists()


def test_feedback_is_capped(folder: Path) -> None:
    bundle = Bundle.load(folder)
    limits = FeedbackLimits(max_rows=3)
    bundle.add_feedback(["a", "b"], {"section": ["libs", "doc"]}, limits=limits)
    with pytest.raises(FeedbackFullError, match=r"feedback is full: 2 rows .* cap of 3 rows"):
        bundle.add_feedback(["c", "d"], {"section": ["libs", "doc"]}, limits=limits)
    assert len(_log(folder)) == 2
    with pytest.raises(ConfigError, match="max_rows must be a positive integer"):
        FeedbackLimits(max_rows=0)


def test_feedback_needs_a_saved_bundle(debian_rows: list) -> None:
    rows = debian_rows[:200]
    bundle = Bundle("hashing")
    bundle.fit_head("section", [r["text"] for r in rows], [r["section"] for r in rows])
    with pytest.raises(BundleError, match="the bundle is not saved yet"):
        bundle.add_feedback(["a"], {"section": ["libs"]})


# -- updates --------------------------------------------------------------------------


def test_update_learns_new_classes_and_keeps_history(folder: Path, debian_rows: list) -> None:
    _, new = _split(debian_rows)
    bundle = Bundle.load(folder)
    probe = [r["text"] for r in new[:20]]
    before = _answers(bundle, probe)
    feedback = new[:300]
    bundle.add_feedback(
        [r["text"] for r in feedback], {"section": [r["section"] for r in feedback]}
    )
    rows = bundle.feedback_rows()
    report = bundle.update_heads(min_feedback=50)
    section, library = report.heads
    assert library.promoted is False and "0 new corrections" in library.reason
    assert section.promoted, section.reason
    assert section.generation == 2 and section.rows_feedback == 300
    assert 0 < section.rows_held_back < 300 and section.after > section.before
    assert section.reason.startswith("not worse")
    # the class list grew: every section of the corrections it learned from is a class
    # now (the held-back ones join its kept data, learned at the next update)
    loaded = Bundle.load(folder)
    learned = {r.labels["section"] for r in rows if not _held(r.id, 0, 0.2)}
    assert len(learned) > 10 and learned <= set(loaded.labels("section"))
    assert loaded.head_info["section"]["generation"] == 2
    assert loaded.head_info["section"]["last_update"]["promoted"] is True
    # folded into the head's kept data, so gone from the log
    assert loaded.feedback_counts() == {} and _log(folder) == []
    kept = loaded.training_data("section")
    assert kept is not None and len(kept[0]) == len(_split(debian_rows)[0]) + 300
    history = loaded.head_history("section")
    assert [(h["generation"], h["current"]) for h in history] == [(2, True), (1, False)]
    # rolled back, the head answers byte for byte as it did
    assert loaded.rollback_head("section") == 1
    again = Bundle.load(folder)
    assert _answers(again, probe) == before
    assert [(h["generation"], h["current"]) for h in again.head_history("section")] == [
        (1, True),
        (2, False),
    ]
    assert again.rollback_head("section", to=2) == 2
    assert _answers(Bundle.load(folder), probe) != before
    with pytest.raises(
        DataError, match="head 'section' keeps no generation 7; it is at generation 2"
    ):
        Bundle.load(folder).rollback_head("section", to=7)


def test_guard_keeps_a_head_that_wrong_corrections_would_make_worse(
    folder: Path, debian_rows: list
) -> None:
    old, _ = _split(debian_rows)
    bundle = Bundle.load(folder)
    probe = [r["text"] for r in old[:20]]
    before = _answers(bundle, probe)
    # every correction says "doc": wrong for most rows
    rows = old[:400]
    bundle.add_feedback([r["text"] for r in rows], {"section": ["doc"] * len(rows)})
    report = bundle.update_heads(["section"])
    (section,) = report.heads
    assert not section.promoted
    assert section.reason.startswith("worse: ")
    assert section.after_old < section.before_old
    loaded = Bundle.load(folder)
    assert _answers(loaded, probe) == before
    assert loaded.head_info["section"].get("generation", 1) == 1
    # judged: they count again only with new corrections
    assert loaded.feedback_counts()["section"] == {"total": 400, "pending": 400, "new": 0}
    assert "0 new corrections" in loaded.update_heads(["section"]).heads[0].reason


def test_dry_run_changes_nothing(folder: Path, debian_rows: list) -> None:
    _, new = _split(debian_rows)
    bundle = Bundle.load(folder)
    bundle.add_feedback(
        [r["text"] for r in new[:100]], {"section": [r["section"] for r in new[:100]]}
    )
    doc = (folder / "bundle.json").read_bytes()
    report = bundle.update_heads(["section"], dry_run=True)
    assert report.dry_run and report.heads[0].promoted
    assert (folder / "bundle.json").read_bytes() == doc
    assert len(_log(folder)) == 100


@pytest.mark.heavy
def test_history_is_bounded(folder: Path, debian_rows: list) -> None:
    _, new = _split(debian_rows)
    bundle = Bundle.load(folder)
    for start in (0, 60, 120):
        chunk = new[start : start + 60]
        bundle.add_feedback([r["text"] for r in chunk], {"section": [r["section"] for r in chunk]})
        assert bundle.update_heads(["section"], keep=2).heads[0].promoted
    history = Bundle.load(folder).head_history("section")
    assert [h["generation"] for h in history] == [4, 3, 2]
    assert len(list((folder / "history").glob("*.safetensors"))) == 2


def test_kept_rows_grow_by_a_gzip_member_each_update(folder: Path, debian_rows: list) -> None:
    """After an update, a head's kept rows are those of its last generation plus its
    corrections: the new file copies the old one's bytes and adds one gzip member, and
    reads back (and loads) as every row."""
    import gzip

    _, new = _split(debian_rows)
    bundle = Bundle.load(folder)
    files = []
    for start in (0, 60):
        chunk = new[start : start + 60]
        bundle.add_feedback([r["text"] for r in chunk], {"section": [r["section"] for r in chunk]})
        assert bundle.update_heads(["section"]).heads[0].promoted
        files.append(folder / bundle.head_info["section"]["data"])
    first, second = files[0].read_bytes(), files[1].read_bytes()
    assert second.startswith(first) and len(second) > len(first)
    assert second[len(first) : len(first) + 2] == b"\x1f\x8b"  # the next gzip member
    texts, labels, _ = Bundle.load(folder).training_data("section")
    assert texts == bundle.training_data("section")[0] and texts[-60:] == [
        r["text"] for r in new[60:120]
    ]
    lines = gzip.decompress(second).decode().splitlines()
    assert len(lines) == len(texts) and json.loads(lines[-1])["label"] == labels[-1]
    # in memory: the rows the heads name now, not every generation's
    named = {info["data"] for info in bundle.head_info.values() if info.get("data")}
    assert set(bundle.state.data) <= named and str(files[0].name) not in str(named)


def test_a_promoted_head_learns_its_held_back_corrections_too(
    folder: Path, debian_rows: list
) -> None:
    """The candidate is judged without the held-back corrections, then refitted with
    them: a label that only a held-back correction names is known after the update."""
    old, new = _split(debian_rows)
    bundle = Bundle.load(folder)
    known = iter(old)
    next_id = 1
    while not _held(next_id, 0, 0.2):  # known labels until the next id is held back
        row = next(known)
        bundle.add_feedback([row["text"]], {"section": [row["section"]]})
        next_id += 1
    bundle.add_feedback([new[0]["text"]], {"section": ["brand-new"]})
    (section,) = bundle.update_heads(["section"]).heads
    assert section.promoted and section.rows_held_back >= 1, section.reason
    classes = Bundle.load(folder).heads["section"].classes_.tolist()
    assert "brand-new" in classes


def test_update_settings_are_checked(folder: Path) -> None:
    bundle = Bundle.load(folder)
    with pytest.raises(ConfigError, match="held_back must be between 0 and 1, got 1.5"):
        bundle.update_heads(held_back=1.5)
    with pytest.raises(ConfigError, match="min_feedback must be a positive integer"):
        bundle.update_heads(min_feedback=0)
    with pytest.raises(ConfigError, match="full must be true or false, got 'yes'"):
        bundle.update_heads(full="yes")


@pytest.mark.heavy  # two updates of a 4-label head, C walked
def test_a_warm_update_starts_from_the_head_and_walks_its_C(
    tmp_path: Path, debian_rows: list
) -> None:
    """The default update fits from the head's weights: the outputs it had start where
    they were, a new label's at zero; a searched C is walked again when a new label
    comes (and its rows recorded), not when a few rows of known labels come."""
    old_rows, new = _split(debian_rows)
    folder = tmp_path / "b"
    bundle = Bundle("hashing")
    bundle.fit_head(
        "section", [r["text"] for r in old_rows], [r["section"] for r in old_rows], C="auto"
    )
    bundle.save(folder)
    info = bundle.head_info["section"]
    assert info["fit"]["C"] == "auto" and info["fit"]["C_rows"] == len(old_rows)
    # a few corrections of known labels: C kept, the head refitted from its weights
    known = old_rows[:40]
    bundle.add_feedback([r["text"] for r in known], {"section": [r["section"] for r in known]})
    (section,) = bundle.update_heads(["section"]).heads
    assert section.fit == "warm" and section.promoted, section.reason
    info = Bundle.load(folder).head_info["section"]
    assert info["fit"]["C_rows"] == len(old_rows) and info["refit"]["how"] == "warm"
    # judged without the held-back corrections, then refitted with them too
    assert section.rows_held_back and info["refit"]["rows"] == len(old_rows) + 40
    # new labels: C walked on a validation split, the reference answered there again
    fresh = new[:200]
    bundle = Bundle.load(folder)
    bundle.add_feedback([r["text"] for r in fresh], {"section": [r["section"] for r in fresh]})
    (section,) = bundle.update_heads(["section"]).heads
    assert section.fit == "warm" and section.promoted, section.reason
    loaded = Bundle.load(folder)
    info = loaded.head_info["section"]
    assert info["fit"]["C_rows"] == len(old_rows) + 40 + 200 - section.rows_held_back
    assert info["reference"]["n"] < len(old_rows) + 240  # its validation split's answers
    assert len(loaded.labels("section")) > len(OLD)
    # --full fits by the recipe, as train does
    bundle = Bundle.load(folder)
    more = new[200:260]
    bundle.add_feedback([r["text"] for r in more], {"section": [r["section"] for r in more]})
    (section,) = bundle.update_heads(["section"], full=True).heads
    assert section.fit == "recipe"


def test_a_warm_start_carries_the_outputs_into_a_grown_class_list() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 8)).astype(np.float32)
    y = np.array(["a", "c", "e"])[X[:, :3].argmax(1)]
    head = LinearHead(C=1.0).fit(X, y)
    coef, intercept = head.coef_.copy(), head.intercept_.copy()
    head.classes_ = np.array(["a", "b", "c", "d", "e"])
    start = head._carried_start(["a", "c", "e"], 8)
    assert start is not None
    np.testing.assert_array_equal(start.coef[[0, 2, 4]], coef)
    np.testing.assert_array_equal(start.coef[[1, 3]], 0)
    np.testing.assert_array_equal(start.intercept[[0, 2, 4]], intercept)
    assert (start.intercept[[1, 3]] == intercept.min()).all()
    # a label these rows lack ("z": its rows all in a validation split) is left out
    start = head._carried_start(["a", "c", "z"], 8)
    assert start is not None
    np.testing.assert_array_equal(start.coef[[0, 2]], coef[:2])
    np.testing.assert_array_equal(start.coef[[1, 3, 4]], 0)
    assert (start.intercept[[1, 3, 4]] == intercept[:2].min()).all()
    # other features: a cold start
    assert head._carried_start(["a", "c", "e"], 9) is None


@pytest.mark.parametrize("kind", ["binary", "multilabel", "hierarchical"])
def test_every_kind_updates(tmp_path: Path, debian_rows: list, kind: str) -> None:
    def label(r: dict[str, Any]) -> Any:
        if kind == "binary":
            return r["library"]
        if kind == "multilabel":
            return r["role"]
        return [f"{r['library']}::{r['section']}"]

    rows = debian_rows[:600]
    bundle = Bundle("hashing")
    bundle.fit_head("h", [r["text"] for r in rows[:400]], [label(r) for r in rows[:400]], kind)
    bundle.save(tmp_path / "b")
    known = set(bundle.labels("h"))

    def fits(r: dict[str, Any]) -> bool:
        value = label(r)
        names = [value] if isinstance(value, str) else value
        if kind == "hierarchical":
            names = [n for p in names for n in (p.split("::")[0], p)]
        return set(names) <= known

    fb = [r for r in rows[400:] if fits(r)]
    bundle.add_feedback([r["text"] for r in fb], {"h": [label(r) for r in fb]})
    (h,) = bundle.update_heads().heads
    assert h.rows_feedback == len(fb) and h.before is not None and h.after is not None
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.head_info["h"]["last_update"]["promoted"] is h.promoted
    assert len(loaded.predict(["a library for parsing"])) == 1


# -- the command line -----------------------------------------------------------------


def _run(capsys: Any, *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_feedback_update_history_rollback(
    folder: Path, tmp_path: Path, debian_rows: list, capsys: Any
) -> None:
    _, new = _split(debian_rows)
    rows = [{"text": r["text"], "section": r["section"]} for r in new[:120]]
    rows.append({"text": "a row with no correction", "other": 1})
    data = write_jsonl(tmp_path / "fb.jsonl", rows)
    code, out, err = _run(capsys, "feedback", data, "-b", folder)
    assert code == 0, err
    assert "kept corrections in" in out and "section 120" in out
    code, out, err = _run(capsys, "update", "-b", folder, "--json", "--heads", "section")
    assert code == 0, err
    report = json.loads(out)
    assert report["heads"][0]["head"] == "section" and report["heads"][0]["promoted"]
    code, out, _ = _run(capsys, "heads", "history", "section", "-b", folder)
    assert code == 0 and "current" in out and "not worse" in out
    code, out, _ = _run(capsys, "heads", "rollback", "section", "-b", folder)
    assert code == 0 and "is at generation 1" in out
    code, out, err = _run(capsys, "heads", "rollback", "section", "-b", folder, "--to", "9")
    assert code == 1
    assert err.strip().splitlines() == [
        "manyheads: error: head 'section' keeps no generation 9; it is at generation 1 and keeps 2"
    ]
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"text": "x", "section": "libs"}])
    code, _, err = _run(capsys, "feedback", bad, "-b", folder, "-t", "nope")
    assert code == 1 and "unknown head 'nope'" in err
    none = write_jsonl(tmp_path / "none.jsonl", [{"text": "x", "topic": "libs"}])
    code, _, err = _run(capsys, "feedback", none, "-b", folder)
    assert code == 1
    assert "no field of the bundle's heads; looked for 'section' (section)" in err


def _update_on(bundle: Bundle, folder: Path, rows: list[dict[str, Any]]) -> None:
    """Fit ``section`` on the old sections, correct it with new ones, update, roll back."""
    old, new = _split(rows)
    bundle.fit_head("section", [r["text"] for r in old], [r["section"] for r in old])
    bundle.save(folder)
    probe = [r["text"] for r in new[:10]]
    before = _answers(bundle, probe)
    bundle.add_feedback(
        [r["text"] for r in new[:200]], {"section": [r["section"] for r in new[:200]]}
    )
    (h,) = bundle.update_heads(margin=50.0).heads  # a wide margin: promoted
    assert h.promoted and h.generation == 2
    loaded = Bundle.load(folder)
    assert len(loaded.labels("section")) > len(OLD)
    loaded.rollback_head("section")
    assert _answers(Bundle.load(folder), probe) == before


@pytest.mark.heavy
@pytest.mark.parametrize("trunk", ["ngram", "fast"])
def test_updates_on_other_trunks(trunk: str, tmp_path: Path, debian_rows: list) -> None:
    _update_on(Bundle(trunk), tmp_path / "b", debian_rows)


@pytest.mark.heavy
def test_updates_on_a_byte_trunk(tmp_path: Path, debian_rows: list) -> None:
    from manyheads.train.byte import train_byte_trunk
    from manyheads.trunks.byte import ByteConfig

    rows = debian_rows[:300]
    tasks = {"section": ([r["section"] for r in rows], "multiclass")}
    small = ByteConfig(channels=32, dims=(16, 32), heads=0)
    trunk, _ = train_byte_trunk([r["text"] for r in rows], tasks, config=small, epochs=1)
    _update_on(Bundle(trunk), tmp_path / "b", debian_rows)


def test_an_update_encodes_only_texts_no_update_before_it_encoded(
    folder: Path, debian_rows: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, new = _split(debian_rows)
    bundle = Bundle.load(folder)
    seen: list[str] = []
    embed = Bundle.embed

    def counted(self: Bundle, texts: Any, **kw: Any) -> Any:
        seen.extend(texts)
        return embed(self, texts, **kw)

    monkeypatch.setattr(Bundle, "embed", counted)
    first, second = new[:120], new[120:180]
    for rows in (first, second):
        seen.clear()
        bundle.add_feedback([r["text"] for r in rows], {"section": [r["section"] for r in rows]})
        assert bundle.update_heads(min_feedback=10).promoted == ["section"]
    # the second update read the kept rows and the first corrections from the first's
    # vectors: only its own corrections reached the trunk
    assert set(seen) == {r["text"] for r in second}
    # another trunk object (a bundle loaded again) starts afresh
    again = Bundle.load(folder)
    seen.clear()
    again.add_feedback(
        [r["text"] for r in new[180:200]], {"section": [r["section"] for r in new[180:200]]}
    )
    again.update_heads(min_feedback=10)
    assert len(set(seen)) > 200
