"""Each head's drift against its reference: quiet on a stationary stream of real texts,
an alarm after a shift, for every head kind; the window, the command and the service."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import TEST_FILE, TRAIN_FILE, write_jsonl

from manyheads import Bundle
from manyheads.cli import main
from manyheads.errors import ConfigError, DataError
from manyheads.jobs import drift_file
from manyheads.learn.drift import (
    NO_LABEL,
    DriftSettings,
    DriftWindow,
    answer_confidence,
    answer_labels,
    design_effect,
    design_effects,
    drift_table,
    reference_profile,
)

LIBS = {"libs", "libdevel", "oldlibs"}
SHIFTED = {"libdevel"}  # the section of the shifted stream: 291 rows
KINDS = {"section": "multiclass", "library": "binary", "role": "multilabel"}
KINDS["area"] = "hierarchical"


def _rows(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _area(row: dict[str, Any]) -> list[str]:
    return [("lib::" if row["section"] in LIBS else "other::") + row["section"]]


@pytest.fixture(scope="module")
def rows() -> dict[str, list[dict[str, Any]]]:
    """Training rows, and rows the heads never saw: the test file (stationary) and the
    training file's later rows of one section (shifted)."""
    train = _rows(TRAIN_FILE)
    later = [r for r in train[1500:] if r["section"] in SHIFTED]
    return {"train": train[:1000], "stationary": _rows(TEST_FILE), "shifted": later}


@pytest.fixture(scope="module")
def bundle(rows, tmp_path_factory) -> Bundle:
    """A hashing bundle with a head of every kind, saved."""
    train = rows["train"]
    texts, groups = [r["text"] for r in train], [r["group"] for r in train]
    labels = {
        "section": [r["section"] for r in train],
        "library": [r["library"] for r in train],
        "role": [r["role"] for r in train],
        "area": [_area(r) for r in train],
    }
    b = Bundle(trunk="hashing", cache=None)
    for name, kind in KINDS.items():
        b.fit_head(name, texts, labels[name], kind, groups=groups, C=1.0, refit=False)
    b.save(tmp_path_factory.mktemp("drift") / "b")
    return b


@pytest.fixture(scope="module")
def answers(bundle, rows) -> dict[str, list[dict[str, Any]]]:
    return {
        part: bundle.predict([r["text"] for r in rows[part]], scores="top")
        for part in ("stationary", "shifted")
    }


def test_every_head_keeps_a_small_json_reference_of_its_validation_answers(bundle):
    for name, kind in KINDS.items():
        ref = bundle.head_info[name]["reference"]
        assert json.loads(json.dumps(ref)) == ref and len(json.dumps(ref)) < 4000
        assert ref["n"] == bundle.head_info[name]["n_val"] > 100
        assert sum(ref["confidence"]["shares"]) == pytest.approx(1, abs=1e-4)
        assert sum(ref["labels"].values()) == pytest.approx(1, abs=1e-4)
        assert 0 < ref["confidence"]["mean"] <= 1, kind
    assert NO_LABEL in bundle.head_info["role"]["reference"]["labels"]  # most have none
    loaded = Bundle.load(bundle.path, cache=None)
    assert loaded.head_info["area"]["reference"] == bundle.head_info["area"]["reference"]


def test_no_alarm_on_a_stationary_stream_of_real_texts(bundle, answers):
    table = drift_table(bundle.head_info, answers["stationary"])
    assert set(table) == set(KINDS)
    for name, row in table.items():
        assert row["window"] == 1000
        assert not row["alarm"], (name, row)
        assert row["psi"] < row["psi_threshold"] and 0 <= row["js"] <= 1
        assert row["reason"] == "within the reference's range"
        assert abs(row["confidence_change"]) < 0.1


def test_an_alarm_after_a_shift_on_every_kind(bundle, answers):
    table = drift_table(bundle.head_info, answers["shifted"])
    for name, row in table.items():
        assert row["alarm"], (name, row)
        assert "PSI" in row["reason"] and row["psi"] > 0.25, name
    assert table["section"]["js"] > 0.3


def test_the_rolling_window_alarms_soon_after_a_shift_and_clears_after(bundle, answers):
    window = DriftWindow(DriftSettings(window=500, min_window=100))
    window.follow(bundle.head_info)
    stationary, shifted = answers["stationary"], answers["shifted"]
    for i in range(0, 1000, 50):
        window.observe(stationary[i : i + 50])
        assert not any(r["alarm"] for r in window.report(bundle.head_info).values())
    assert window.size == 500
    first = None
    for i in range(0, 500, 10):
        window.observe(shifted[i : i + 10])
        if window.report(bundle.head_info)["section"]["alarm"]:
            first = i + 10
            break
    assert first is not None and first <= 300
    window.observe(stationary[:500])  # the inputs came back: a whole window of them
    assert not window.report(bundle.head_info)["section"]["alarm"]


def test_a_replaced_head_starts_its_window_again(bundle, answers):
    window = DriftWindow()
    window.follow(bundle.head_info)
    window.observe(answers["stationary"][:300])
    info = {name: dict(i) for name, i in bundle.head_info.items()}
    info["role"]["created"] = "2099-01-01T00:00:00+00:00"  # trained again
    window.follow(info)
    rows = window.report(info)
    assert rows["role"]["window"] == 0 and rows["role"]["reason"] == "no answers yet"
    assert rows["section"]["window"] == 300
    window.observe(answers["stationary"][300:400])
    assert window.report(info)["role"]["window"] == 100


def test_the_design_effect_of_rows_that_come_in_groups():
    """Rows of a group that all get one answer vary like one row each: the design effect
    is the group's size; rows on their own, or too few groups, count as 1."""
    labels = [[str(i % 4)] for i in range(400)]
    assert design_effect(labels, list(range(400))) == pytest.approx(1, abs=0.05)
    grouped = [[str((i // 8) % 4)] for i in range(400)]  # 50 groups of 8 alike
    assert design_effect(grouped, [i // 8 for i in range(400)]) == pytest.approx(8, rel=0.05)
    assert design_effect(grouped, [i // 50 for i in range(400)]) == 1.0  # 8 groups
    ref = reference_profile(
        [{"label": c[0], "score": 0.9} for c in grouped], [i // 8 for i in range(400)]
    )
    assert ref["design_effect"]["labels"] == pytest.approx(8, rel=0.05)
    assert ref["design_effect"]["confidence"] == 1.0  # one bin: nothing varies


def test_the_design_spread_is_the_spread_of_the_design_effect_matrix_eigenvalues():
    """Labels that all come in groups alike vary alike (spread 0); some in large groups and
    some on their own spread the eigenvalues of n diag(p)^-1 V, as a direct eigen
    decomposition finds them."""
    alike = [[str((i // 8) % 4)] for i in range(400)]
    mean, spread = design_effects(alike, [i // 8 for i in range(400)])
    assert mean == pytest.approx(8, rel=0.05) and spread < 0.05
    rng = np.random.default_rng(0)
    cells: list[list[str]] = []
    groups: list[int] = []
    for g in range(120):  # labels a, b in groups of 10 alike; c, d, e one row each
        if g % 2:
            cells += [["a" if g % 4 == 1 else "b"]] * 10
            groups += [g] * 10
        else:
            for j in range(10):
                cells.append([str(rng.choice(["c", "d", "e"]))])
                groups.append(1000 * g + j)
    mean, spread = design_effects(cells, groups)
    # the eigenvalues directly: n diag(p)^-1 V over the cells, the one zero one left out
    names = sorted({c[0] for c in cells})
    ids = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    y = np.zeros((len(ids), len(names)))
    for c, g in zip(cells, groups, strict=True):
        y[ids[g], names.index(c[0])] += 1
    n, G = len(cells), len(ids)
    p = y.sum(axis=0) / n
    e = y - np.outer(y.sum(axis=1), p)
    V = G / (G - 1) * e.T @ e / n**2
    lam = np.sort(np.real(np.linalg.eigvals(n * np.diag(1 / p) @ V)))[1:]
    assert mean == pytest.approx(lam.mean(), rel=1e-6)
    assert spread == pytest.approx(lam.var() / lam.mean() ** 2, rel=1e-6)
    assert spread > 0.3  # groups of 10 for two labels, single rows for three


def test_the_design_effect_widens_the_threshold_and_bad_values_are_ignored(bundle, answers):
    info = bundle.head_info["section"]
    base = drift_table({"section": info}, answers["stationary"])["section"]
    assert base["design_effect"] == pytest.approx(info["reference"]["design_effect"]["labels"])
    for value, expect in ((4.0, 4.0), ("4", 1.0), (True, 1.0), (1e9, 1.0)):
        ref = {**info["reference"], "design_effect": {"labels": value, "confidence": value}}
        row = drift_table({"section": {**info, "reference": ref}}, answers["stationary"])
        assert row["section"]["design_effect"] == expect
        if expect == 4.0:
            assert row["section"]["psi_threshold"] >= base["psi_threshold"]
    base = drift_table({"section": info}, answers["stationary"], DriftSettings(psi_alarm=1e-9))
    for value, expect in ((2.0, 2.0), ("2", 0.0), (True, 0.0), (-1.0, 0.0), (1e9, 0.0)):
        ref = {**info["reference"], "design_spread": {"labels": value, "confidence": value}}
        settings = DriftSettings(psi_alarm=1e-9)  # the chance threshold itself
        row = drift_table({"section": {**info, "reference": ref}}, answers["stationary"], settings)
        assert row["section"]["design_spread"] == expect
        wider = row["section"]["psi_threshold"] > base["section"]["psi_threshold"] * 1.2
        assert wider == (expect == 2.0)


def test_a_refitted_multiclass_head_takes_its_reference_from_out_of_fold_answers(rows):
    train = rows["train"][:600]
    b = Bundle(trunk="hashing", cache=None)
    texts = [r["text"] for r in train]
    b.fit_head("section", texts, [r["section"] for r in train], groups=[r["group"] for r in train])
    ref = b.head_info["section"]["reference"]
    assert ref["n"] == len(train)  # every row, answered by a fold that did not see it
    assert ref["design_effect"]["labels"] >= 1.0


def test_a_head_without_a_reference_never_alarms(bundle, answers):
    info = {"section": {k: v for k, v in bundle.head_info["section"].items() if k != "reference"}}
    row = drift_table(info, answers["shifted"])["section"]
    assert not row["alarm"] and row["psi"] is None and row["window"] == 291
    assert row["reason"].startswith("no reference: the head was trained before")


def test_few_answers_do_not_alarm(bundle, answers):
    row = drift_table(bundle.head_info, answers["shifted"][:50])["section"]
    assert not row["alarm"] and row["reason"] == "50 answers, fewer than the 200 to judge"


def test_the_answers_a_window_counts():
    assert answer_labels({"label": "doc", "score": 0.9}) == ["doc"]
    assert answer_labels({"label": None, "score": None, "scores": {}}) == [NO_LABEL]
    assert answer_labels({"labels": [], "scores": {"a": 0.2}}) == [NO_LABEL]
    assert answer_labels({"labels": ["a", "b"]}) == ["a", "b"]
    assert answer_confidence({"labels": ["a"], "scores": {"a": 0.7, "b": 0.9}}) == 0.7
    assert answer_confidence({"labels": [], "scores": {"a": 0.2}}) is None
    assert answer_confidence({"labels": ["a"]}) is None  # no scores kept
    ref = reference_profile([{"label": "x", "score": 1.0}, {"label": None, "score": None}])
    assert ref["labels"] == {NO_LABEL: 0.5, "x": 0.5} and ref["confidence"]["shares"][-1] == 1


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"window": 0}, "drift window must be a positive integer, got 0"),
        ({"window": 100, "min_window": 500}, "min_window must be between 1 and the window (100)"),
        ({"psi_alarm": -1}, "psi_alarm must be over 0 and at most 100, got -1"),
        ({"alpha": "x"}, "alpha must be a number, got 'x'"),
    ],
)
def test_bad_settings_are_refused_in_one_line(settings, message):
    with pytest.raises(ConfigError) as err:
        DriftSettings(**settings)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_drift_table_refuses_other_settings(bundle):
    with pytest.raises(ConfigError, match="settings must be DriftSettings, got dict"):
        drift_table(bundle.head_info, [], settings={"window": 5})  # type: ignore[arg-type]


# -- the command --------------------------------------------------------------------


def run(capsys, *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_prints_the_table_and_exits_3_when_a_head_alarms(
    bundle, rows, tmp_path, capsys
):
    quiet = write_jsonl(tmp_path / "quiet.jsonl", rows["stationary"])
    code, out, _ = run(capsys, "drift", quiet, "-b", bundle.path)
    assert code == 0, out
    assert out.splitlines()[0] == "1000 rows (texts)"
    assert out.splitlines()[-1] == "no drift alarm"
    shifted = write_jsonl(tmp_path / "shifted.jsonl", rows["shifted"])
    code, out, _ = run(capsys, "drift", shifted, "-b", bundle.path, "--json")
    assert code == 3
    doc = json.loads(out)
    assert doc["alarm"] and doc["source"] == "texts" and doc["rows"] == 291
    assert set(doc["heads"]) == set(KINDS) and doc["heads"]["section"]["alarm"]
    code, out, _ = run(capsys, "drift", shifted, "-b", bundle.path, "--heads", "section")
    assert code == 3 and out.splitlines()[-1] == "drift alarm: section"


def test_a_label_output_is_read_as_it_is(bundle, rows, tmp_path, capsys):
    data = write_jsonl(tmp_path / "in.jsonl", rows["shifted"])
    code, out, _ = run(capsys, "label", data, "-b", bundle.path, "-o", tmp_path / "o.csv")
    assert code == 0, out
    from_texts = drift_file(bundle.path, data)
    for output in ("o.csv", "o.jsonl"):
        code, out, _ = run(
            capsys, "label", data, "-b", bundle.path, "-o", tmp_path / output, "--drift"
        )
        assert code == 0 and out.splitlines()[-1] == "drift alarm: section, library, role, area"
        found = drift_file(bundle.path, tmp_path / output)
        assert found.source == "labelled" and found.rows == 291
        for name in KINDS:  # the same answers, read back
            assert found.heads[name]["psi"] == pytest.approx(from_texts.heads[name]["psi"])
    assert found.heads["role"]["confidence_psi"] == pytest.approx(
        from_texts.heads["role"]["confidence_psi"]
    )


def test_the_command_window_judges_the_last_rows(bundle, rows, tmp_path, capsys):
    data = write_jsonl(tmp_path / "in.jsonl", rows["shifted"][:300] + rows["stationary"])
    code, out, _ = run(capsys, "drift", data, "-b", bundle.path, "--window", "500", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["rows"] == 1291 and doc["heads"]["section"]["window"] == 500


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.jsonl"], "cannot read missing.jsonl: no such file or folder"),
        (["empty.jsonl"], "empty.jsonl: no rows"),
        (["in.jsonl", "--window", "0"], "drift window must be a positive integer, got 0"),
        (["in.jsonl", "--heads", "nope"], "nope"),
        (["in.jsonl", "--text-field", "body"], "body"),
    ],
)
def test_bad_command_input_is_one_line(bundle, rows, tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "in.jsonl", rows["stationary"][:10])
    (tmp_path / "empty.jsonl").write_text("")
    code, out, err = run(capsys, "drift", *args, "-b", bundle.path)
    assert code == 1 and out == ""
    assert err.startswith("manyheads: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_a_flat_score_that_is_no_number_is_one_line(bundle, tmp_path):
    rows = [{"text": "t", **{h: "x" for h in KINDS}, **{f"{h}_score": "high" for h in KINDS}}]
    with pytest.raises(DataError, match="line 1: a score that is not a number: 'high'"):
        drift_file(bundle.path, write_jsonl(tmp_path / "o.jsonl", rows))


# -- the service --------------------------------------------------------------------


def _gauge(metrics: str, name: str, head: str) -> float:
    prefix = f'manyheads_drift_{name}{{head="{head}"}} '
    line = next(x for x in metrics.splitlines() if x.startswith(prefix))
    return float(line[len(prefix) :])


@pytest.mark.heavy
def test_the_service_reports_drift_and_its_gauges(bundle, rows, start_server, tmp_path):
    httpx = pytest.importorskip("httpx")
    (tmp_path / "keys.txt").write_text("drift-key-0123456789abcdef\n")
    srv = start_server(bundle.path, "--api-key-file", str(tmp_path / "keys.txt"))
    auth = {"Authorization": "Bearer drift-key-0123456789abcdef"}
    with httpx.Client(base_url=srv.url, timeout=120, headers=auth) as client:
        assert httpx.get(srv.url + "/v1/drift").status_code == 401  # read with a key
        texts = [r["text"] for r in rows["stationary"][:400]]
        for i in range(0, 400, 100):
            assert client.post("/v1/predict", json={"texts": texts[i : i + 100]}).status_code == 200
        doc = client.get("/v1/drift").json()
        assert doc["window"] == 1000 and doc["alarm"] is False
        assert {h["name"] for h in doc["heads"]} == set(KINDS)
        assert all(h["window"] == 400 and not h["alarm"] for h in doc["heads"])
        shifted = [r["text"] for r in rows["shifted"]]
        assert client.post("/v1/predict", json={"texts": shifted}).status_code == 200
        doc = client.get("/v1/drift").json()
        section = next(h for h in doc["heads"] if h["name"] == "section")
        assert doc["alarm"] and section["alarm"] and section["window"] == 691
        metrics = client.get("/metrics").text
        assert _gauge(metrics, "alarm", "section") == 1
        assert _gauge(metrics, "window", "role") == 691
        assert _gauge(metrics, "psi", "section") == pytest.approx(section["psi"])
        # a head trained again starts its window again
        body = {"texts": texts[:200], "labels": [r["library"] for r in rows["stationary"][:200]]}
        body["kind"] = "binary"
        assert client.post("/v1/heads/library/train", json=body).status_code == 200
        heads = {h["name"]: h for h in client.get("/v1/drift").json()["heads"]}
        assert heads["library"]["window"] == 0 and heads["section"]["window"] == 691


def test_a_label_output_starting_with_a_bad_row_is_still_read_as_one(bundle, rows, tmp_path):
    data = write_jsonl(tmp_path / "in.jsonl", [{"body": "no text"}, *rows["shifted"]])
    code = main(["label", str(data), "-b", str(bundle.path), "-o", str(tmp_path / "o.jsonl")])
    assert code == 0
    first = json.loads((tmp_path / "o.jsonl").read_text().splitlines()[0])
    assert first["section"] is None  # the bad row, kept in the output
    found = drift_file(bundle.path, tmp_path / "o.jsonl")
    assert found.source == "labelled" and found.rows == 291 and found.alarm


# -- the inputs: where the texts lie, against the texts a head was built on -----------


@pytest.fixture(scope="module")
def meaning(rows) -> tuple[Bundle, dict[str, Any]]:
    """A `static` bundle (a trunk that maps meaning) with a section head, and the trunk's
    vectors of the stationary and shifted rows."""
    train = rows["train"]
    b = Bundle(trunk="static", cache=None)
    b.fit_head("section", [r["text"] for r in train], [r["section"] for r in train],
               groups=[r["group"] for r in train], C=1.0, refit=False)  # fmt: skip
    vectors = {part: b.embed([r["text"] for r in rows[part]]) for part in ("stationary", "shifted")}
    return b, vectors


def test_a_head_keeps_where_its_texts_lay_on_a_trunk_that_maps_meaning(meaning, bundle):
    b, _ = meaning
    inputs = b.head_info["section"]["reference"]["inputs"]
    assert inputs["columns"] == [0, 256] and len(inputs["center"]) == 256
    assert len(inputs["components"]) == len(inputs["variances"]) == 16
    assert 300 < inputs["n"] < 700 and 1 <= inputs["design_effect"] <= 50  # half the rows
    assert len(json.dumps(inputs)) < 17 * 256 * 14  # plain JSON, short numbers
    assert "inputs" not in bundle.head_info["section"]["reference"]  # hashing: no meaning


def test_the_inputs_stay_quiet_on_stationary_texts_and_alarm_on_a_shift(meaning, rows):
    b, vectors = meaning
    found = {}
    for part in ("stationary", "shifted"):
        answers = b.predict([r["text"] for r in rows[part]], scores="top")
        found[part] = drift_table(b.head_info, answers, vectors=vectors[part])["section"]
        assert found[part]["inputs_window"] == len(rows[part])
    quiet = found["stationary"]
    assert quiet["inputs_t2"] < quiet["inputs_threshold"] and "inputs" not in quiet["reason"]
    assert found["shifted"]["inputs_t2"] > 2 * quiet["inputs_t2"]  # one section's texts
    code = [r["text"] for r in _rows(Path(__file__).parent / "shapes" / "code.jsonl.gz")]
    settings = DriftSettings(window=None, min_window=50)
    row = drift_table(b.head_info, b.predict(code), settings, vectors=b.embed(code))["section"]
    assert row["inputs_t2"] > row["inputs_threshold"] and "inputs T²" in row["reason"]
    no_vectors = drift_table(b.head_info, b.predict(code))["section"]
    assert no_vectors["inputs_t2"] is None and no_vectors["inputs_window"] is None


def test_the_window_of_vectors_rolls_and_follows_the_served_texts(meaning, rows):
    from manyheads.bundle import vectors_seen

    b, vectors = meaning
    window = DriftWindow(DriftSettings(window=60, min_window=50))
    window.follow(b.head_info)
    code = _rows(Path(__file__).parent / "shapes" / "code.jsonl.gz")  # code, not prose
    shifted = [r["text"] for r in code]
    with vectors_seen() as seen:  # what the service does with each pass
        window.observe(b.predict(shifted[:40]))
        window.observe(b.predict(shifted[40:]))
    for X in seen:
        window.observe_vectors(X)
    assert len(seen) == 2  # a block of vectors a pass
    row = window.report(b.head_info)["section"]
    assert row["inputs_window"] == 60 and row["inputs_t2"] > row["inputs_threshold"]
    assert row["alarm"] and "inputs T²" in row["reason"]
    window.observe_vectors(vectors["stationary"][:60])  # a whole window of the old texts
    row = window.report(b.head_info)["section"]
    assert row["inputs_window"] == 60 and row["inputs_t2"] < row["inputs_threshold"]
    info = {"section": {**b.head_info["section"], "created": "2099-01-01T00:00:00+00:00"}}
    window.follow(info)  # trained again: its window starts again
    assert window.report(info)["section"]["inputs_window"] is None


@pytest.mark.parametrize(
    "broken",
    [
        {"variances": [0.0] * 16},
        {"components": [[0.1] * 5] * 16},
        {"columns": "all"},
        {"center": None},
        {"version": 99},
    ],
)
def test_an_inputs_reference_that_does_not_read_gives_no_inputs_row(meaning, broken):
    b, vectors = meaning
    info = dict(b.head_info["section"])
    info["reference"] = {**info["reference"], "inputs": {**info["reference"]["inputs"], **broken}}
    row = drift_table({"section": info}, [], vectors=vectors["shifted"])["section"]
    assert row["inputs_t2"] is None and not row["alarm"]


def test_an_update_takes_the_texts_it_learnt_from_into_the_inputs_reference(meaning, rows):
    from manyheads.train.fit import refit_head

    b, _ = meaning
    copy = Bundle(trunk=b.trunk, cache=None)  # the same trunk object: no second load
    copy.add_head("section", b.heads["section"], info=dict(b.head_info["section"]))
    texts = [r["text"] for r in rows["train"] + rows["shifted"]]
    labels = [r["section"] for r in rows["train"] + rows["shifted"]]
    groups = [r["group"] for r in rows["train"] + rows["shifted"]]
    refit_head(copy, "section", texts, labels, groups=groups, search=False)
    inputs = copy.head_info["section"]["reference"]["inputs"]
    assert 0.3 * len(texts) < inputs["n"] < 0.7 * len(texts)  # half of every row
    answers = copy.predict([r["text"] for r in rows["shifted"]])
    vectors = copy.embed([r["text"] for r in rows["shifted"]])
    before = drift_table(b.head_info, answers, vectors=vectors)["section"]
    after = drift_table(copy.head_info, answers, vectors=vectors)["section"]
    assert after["inputs_t2"] < before["inputs_t2"]


def test_a_candidate_keeps_the_old_inputs_reference_and_the_head_its_tolerance(meaning, rows):
    from manyheads.train.fit import refit_head

    b, _ = meaning
    copy = Bundle(trunk=b.trunk, cache=None)
    copy.add_head("section", b.heads["section"], info=dict(b.head_info["section"]))
    every = rows["train"] + rows["shifted"]
    texts, labels = [r["text"] for r in every], [r["section"] for r in every]
    before = b.head_info["section"]["reference"]["inputs"]
    refit_head(copy, "section", texts, labels, search=False, candidate=True)
    assert copy.head_info["section"]["reference"]["inputs"] == before
    assert copy.heads["section"].tol == b.heads["section"].tol
    loose = copy.heads["section"].coef_.copy()
    # the head promoted goes on from the candidate to its own tolerance
    refit_head(copy, "section", texts, labels, search=False)
    assert copy.head_info["section"]["reference"]["inputs"]["n"] > before["n"]
    assert not np.array_equal(loose, copy.heads["section"].coef_)


@pytest.mark.heavy
def test_the_service_watches_the_inputs_of_what_it_answers(meaning, rows, start_server, tmp_path):
    httpx = pytest.importorskip("httpx")
    b, _ = meaning
    folder = b.save(tmp_path / "static-bundle")
    srv = start_server(folder)
    with httpx.Client(base_url=srv.url, timeout=120) as client:
        texts = [r["text"] for r in rows["stationary"][:300]]
        for i in range(0, 300, 100):
            assert client.post("/v1/predict", json={"texts": texts[i : i + 100]}).status_code == 200
        before = client.get("/v1/drift").json()["heads"][0]
        assert before["inputs_window"] == 300
        assert before["inputs_t2"] < before["inputs_threshold"] and not before["alarm"]
        code = [r["text"] for r in _rows(Path(__file__).parent / "shapes" / "code.jsonl.gz")]
        assert client.post("/v1/predict", json={"texts": code}).status_code == 200
        section = client.get("/v1/drift").json()["heads"][0]
        assert section["inputs_window"] == 380  # 80 of them code: the mean moved
        assert section["inputs_t2"] > 2 * before["inputs_t2"]
        assert _gauge(client.get("/metrics").text, "inputs_t2", "section") == pytest.approx(
            section["inputs_t2"]
        )
