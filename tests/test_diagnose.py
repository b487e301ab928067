"""``manyheads diagnose``: the separability scores (kNN, the chance-calibrated
discordance, the probe), teacher compatibility (CKA, Gromov-Wasserstein, grouping),
the trunk and teacher diagnoses, the job and the command, and every bad input."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import write_jsonl

from manyheads import Bundle
from manyheads.absorb.diagnose import diagnose_trunks
from manyheads.cli import main
from manyheads.errors import ConfigError, DataError, MissingDependencyError
from manyheads.evaluate.compatibility import gromov_wasserstein, group_teachers, linear_cka
from manyheads.evaluate.diagnosis import diagnose_teachers
from manyheads.evaluate.separability import (
    discordance,
    knn_accuracy,
    linear_probe,
    span_coordinates,
)

SHARES = [0.5, 0.2, 0.15, 0.1, 0.05]  # unbalanced on purpose: chance is still 0.5


def _random(n: int, d: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """A label-blind embedding: Gaussian vectors, labels drawn apart from them."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), [f"c{i}" for i in rng.choice(len(SHARES), n, p=SHARES)]


def _separable(n: int, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 4, n)
    return np.eye(4)[codes] * 5 + rng.normal(scale=0.1, size=(n, 4)), [f"c{c}" for c in codes]


# -- separability ---------------------------------------------------------------------


def test_a_random_embedding_scores_discordance_one_half():
    X, y = _random(1500, 16, seed=0)
    assert discordance(X, y, seed=0) == pytest.approx(0.5, abs=0.02)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_random_embedding_scores_one_half_on_every_seed(seed):
    X, y = _random(1200, 24, seed=seed)
    assert discordance(X, y, seed=seed) == pytest.approx(0.5, abs=0.02)


def test_chance_holds_for_sparse_vectors_groups_and_label_sets():
    X, y = _random(1200, 32, seed=5)
    groups = [i // 3 for i in range(len(y))]
    assert discordance(sp.csr_matrix(X), y, groups=groups) == pytest.approx(0.5, abs=0.02)
    rng = np.random.default_rng(5)
    sets = [[t for t in "ab" if rng.random() < 0.4] for _ in y]
    assert discordance(X, sets, kind="multilabel") == pytest.approx(0.5, abs=0.02)


def test_knn_accuracy_is_not_chance_calibrated_but_discordance_is():
    X, _ = _random(1000, 16, seed=6)
    y = ["big" if i % 10 else "small" for i in range(1000)]  # 90% one label
    assert knn_accuracy(X, y) > 0.85  # about the commonest label's share
    assert discordance(X, y) == pytest.approx(0.5, abs=0.03)


def test_a_separable_embedding_scores_near_one():
    X, y = _separable(600)
    assert discordance(X, y) > 0.99
    assert knn_accuracy(X, y) > 0.99
    assert linear_probe(X, y).accuracy > 0.97


def test_a_random_embedding_scores_chance_on_knn_and_probe():
    X, y = _random(1000, 16, seed=7)
    assert knn_accuracy(X, y) < 0.56  # the commonest label's share is 0.5
    assert linear_probe(X, y).accuracy < 0.58


def test_groups_keep_duplicates_from_being_neighbours():
    """Each group: two copies of one vector, one label drawn at random; without groups a
    copy is its twin's nearest neighbour."""
    rng = np.random.default_rng(8)
    base = rng.normal(size=(300, 16))
    X = np.repeat(base, 2, axis=0)
    y = list(np.repeat(rng.choice(["a", "b"], 300), 2))
    groups = list(np.repeat(np.arange(300), 2))
    assert knn_accuracy(X, y, k=1) == 1.0
    assert knn_accuracy(X, y, k=1, groups=groups) < 0.6
    assert discordance(X, y, groups=groups) == pytest.approx(0.5, abs=0.03)


def test_label_sets_are_judged_by_exact_match():
    X, y = _separable(400)
    sets = [["x", label] if label in ("c0", "c1") else [label] for label in y]
    assert knn_accuracy(X, sets, kind="multilabel") > 0.99
    assert discordance(X, sets, kind="multilabel") > 0.99
    probe = linear_probe(X, sets, kind="multilabel")
    assert probe.accuracy > 0.95 and probe.n_test > 0


def test_the_probe_fits_wide_vectors_in_the_span_of_the_items():
    X = sp.random(60, 500, density=0.05, format="csr", random_state=0)
    Z = span_coordinates(X)
    assert Z.shape[0] == 60 and Z.shape[1] <= 60
    unit = X.multiply(1 / np.sqrt(X.multiply(X).sum(axis=1)))
    np.testing.assert_allclose(Z @ Z.T, (unit @ unit.T).toarray(), atol=1e-5)
    y = [f"c{i % 3}" for i in range(60)]
    assert knn_accuracy(Z, y) == knn_accuracy(X, y)
    assert discordance(Z, y) == pytest.approx(discordance(X, y), abs=1e-9)
    narrow = np.random.default_rng(0).normal(size=(60, 8))
    assert span_coordinates(narrow) is narrow


def test_the_discordance_is_seeded():
    X, y = _random(500, 8, seed=9)
    assert discordance(X, y, seed=3) == discordance(X, y, seed=3)
    assert discordance(X, y, seed=3) != discordance(X, y, seed=4)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: knn_accuracy(np.ones((3, 2)), ["a", "b"]), DataError, "3 vectors but 2 labels"),
        (lambda: discordance(np.ones((4, 2)), ["a"] * 4), DataError, "every item has the label 'a'"),
        (lambda: knn_accuracy(np.eye(5), list("aabbc"), k=5), ConfigError, r"k must be smaller than the number of items \(5\), got 5"),
        (lambda: knn_accuracy(np.eye(6), list("aabbcc"), k=3, groups=[0, 0, 0, 0, 1, 2]), ConfigError, r"k must be at most the items outside the largest group \(2\), got 3"),
        (lambda: knn_accuracy(np.eye(4), list("abab"), k=0), ConfigError, "k must be a positive integer, got 0"),
        (lambda: discordance(np.eye(4), list("abab"), k=5, candidates=4), ConfigError, r"k must be at most candidates \(4\), got 5"),
        (lambda: discordance(np.eye(4), list("abcd")), DataError, "no label has two items: the discordance"),
        (lambda: knn_accuracy(np.full((4, 2), np.nan), list("abab")), DataError, "vectors hold NaN or infinite values"),
        (lambda: knn_accuracy(np.ones(4), list("abab")), DataError, r"vectors must be a 2-D array .* got shape \(4,\)"),
        (lambda: knn_accuracy(np.eye(1), ["a"]), DataError, "need at least 2 items, got 1"),
        (lambda: knn_accuracy(np.eye(3), ["a", "b", "a"], kind="multilabel"), DataError, "label #0 of a multilabel task must be a list of labels, got str"),
        (lambda: knn_accuracy(np.eye(3), [["a"], "b", "a"]), DataError, r"label #0 of a multiclass task must be one label, got \['a'\]"),
        (lambda: knn_accuracy(np.eye(3), list("aba"), kind="tags"), ConfigError, "kind must be one of multiclass, binary, multilabel, hierarchical, got 'tags'"),
        (lambda: knn_accuracy(np.eye(3), list("aba"), groups=[1, 2]), DataError, "3 vectors but 2 groups"),
        (lambda: linear_probe(np.eye(4), list("abab"), split=([0, 1], [])), DataError, "the probe's split needs items on both sides"),
        (lambda: linear_probe(np.eye(4), list("abab"), split=([0, 1], [9])), DataError, "the probe's split names item 9 of 4"),
    ],
)  # fmt: skip
def test_bad_separability_inputs_get_one_line_errors(call, error, message):
    with pytest.raises(error, match=message) as info:
        call()
    assert "\n" not in str(info.value)


# -- compatibility --------------------------------------------------------------------


def _rotated(X: np.ndarray, seed: int, scale: float = 3.0) -> np.ndarray:
    Q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(X.shape[1], X.shape[1])))
    return X @ Q * scale


def test_linear_cka_is_one_for_the_same_features_up_to_rotation_and_scale():
    X = np.random.default_rng(0).normal(size=(400, 12))
    assert linear_cka(X, X) == pytest.approx(1.0)
    assert linear_cka(X, _rotated(X, 1)) == pytest.approx(1.0)
    wide = np.random.default_rng(1).normal(size=(40, 120))  # fewer texts than features
    assert linear_cka(wide, _rotated(wide, 2)) == pytest.approx(1.0)
    noise = np.random.default_rng(3).normal(size=(400, 12))
    assert linear_cka(X, noise) < 0.1
    assert 0.3 < linear_cka(X, X + noise) < 0.9  # half signal, half noise


def test_gromov_wasserstein_is_zero_for_the_same_geometry_and_larger_for_unrelated():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 8))
    assert gromov_wasserstein(X, X) == pytest.approx(0.0, abs=1e-8)
    assert gromov_wasserstein(X, _rotated(X, 1)) == pytest.approx(0.0, abs=1e-8)
    clusters = np.repeat(np.eye(8) * 4, 19, axis=0)[:150] + rng.normal(scale=0.2, size=(150, 8))
    assert gromov_wasserstein(X, clusters) > 100 * max(gromov_wasserstein(X, _rotated(X, 2)), 1e-6)


def test_gromov_wasserstein_without_pot_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ot", None)  # import ot raises ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'manyheads\[diagnose\]'"):
        gromov_wasserstein(np.eye(4), np.eye(4))


def test_group_teachers_links_every_two_members_not_chains():
    names = ["a", "b", "c", "d"]
    S = np.array(
        [[1.0, 0.9, 0.5, 0.1], [0.9, 1.0, 0.9, 0.1], [0.5, 0.9, 1.0, 0.1], [0.1, 0.1, 0.1, 1.0]]
    )
    assert group_teachers(names, S, 0.8) == [["a", "b"], ["c"], ["d"]]  # a~c is only 0.5
    assert group_teachers(names, S, 0.4) == [["a", "b", "c"], ["d"]]
    assert group_teachers(names, S, 1.0) == [["a"], ["b"], ["c"], ["d"]]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: linear_cka(np.eye(4), np.eye(5)), DataError, "X and Y must hold the same texts: 4 rows and 5 rows"),
        (lambda: linear_cka(np.ones((4, 2)), np.eye(4)), DataError, "X is the same vector for every text"),
        (lambda: linear_cka(np.eye(2), np.eye(2)), DataError, "need at least 3 texts, got 2"),
        (lambda: gromov_wasserstein(np.eye(4), np.full((4, 2), np.inf)), DataError, "Y holds NaN or infinite values"),
        (lambda: group_teachers(["a", "b"], np.eye(2), 1.5), ConfigError, r"threshold must be in \(0, 1\], got 1.5"),
        (lambda: group_teachers(["a", "b"], [[1, 0.2], [0.9, 1]]), DataError, "similarity must be a finite, symmetric matrix"),
        (lambda: group_teachers(["a", "a"], np.eye(2)), ConfigError, "names must be distinct"),
        (lambda: group_teachers(["a", "b"], np.eye(3)), DataError, r"similarity must be 2 × 2, got shape \(3, 3\)"),
    ],
)  # fmt: skip
def test_bad_compatibility_inputs_get_one_line_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


# -- diagnoses ------------------------------------------------------------------------


class NoiseTrunk:
    """A trunk that knows nothing: each text's vector is seeded by its hash."""

    name, dim, fingerprint = "noise", 32, "noise-v1"

    def spec(self) -> dict[str, Any]:
        return {"type": "noise"}

    def encode(self, texts: Sequence[str], **_: Any) -> np.ndarray:
        seeds = [int(hashlib.sha256(t.encode()).hexdigest()[:8], 16) for t in texts]
        X = np.stack([np.random.default_rng(s).normal(size=self.dim) for s in seeds])
        return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def rows(debian_rows) -> list[dict[str, Any]]:
    return debian_rows[:400]


def test_diagnose_trunks_ranks_a_real_trunk_above_noise(rows):
    texts = [r["text"] for r in rows]
    tasks = {
        "section": ("multiclass", [r["section"] for r in rows]),
        "role": ("multilabel", [r["role"] for r in rows]),
    }
    got = diagnose_trunks(
        texts, tasks, {"tfidf": "tfidf", "noise": NoiseTrunk()},
        groups=[r["group"] for r in rows], sample=300, cache=None,
    )  # fmt: skip
    assert got.n == 300 and got.n_train + got.n_test == 300
    assert got.dims == {"tfidf": 2**14, "noise": 32}
    for task in got.tasks.values():
        assert task.ranking == ["tfidf", "noise"]
        probes = [s.probe for s in task.scores]
        assert probes == sorted(probes, reverse=True)
    section = {s.trunk: s for s in got.tasks["section"].scores}
    assert section["noise"].discordance == pytest.approx(0.5, abs=0.05)
    assert section["tfidf"].discordance > 0.6
    doc = got.as_dict()
    assert doc["tasks"]["section"]["ranking"] == ["tfidf", "noise"]
    assert json.loads(json.dumps(doc)) == doc


def test_more_neighbours_than_candidates_widen_the_candidates(rows):
    texts = [r["text"] for r in rows]
    tasks = {"library": ("binary", [r["library"] for r in rows])}
    got = diagnose_trunks(texts, tasks, ["hashing"], sample=200, k=40, cache=None)
    assert got.k == 40 and 0.4 < got.tasks["library"].scores[0].discordance <= 1


class FakeTeacher:
    """What diagnose_teachers asks of a teacher: a name and features of texts."""

    def __init__(self, name: str, make: Any) -> None:
        self.name, self._make = name, make

    def features(self, texts: Sequence[str]) -> np.ndarray:
        return self._make(texts)


def test_diagnose_teachers_groups_teachers_that_see_texts_alike(rows):
    texts = [r["text"] for r in rows]
    base = Bundle(trunk="hashing", cache=None)
    dense = lambda t: base.embed(t).toarray()[:, :64]  # noqa: E731
    teachers = [
        FakeTeacher("a", dense),
        FakeTeacher("b", lambda t: _rotated(dense(t), 0)),
        FakeTeacher("c", lambda t: NoiseTrunk().encode(t)),
    ]
    got = diagnose_teachers(texts, teachers, sample=120)
    assert got.groups == [["a", "b"], ["c"]]
    assert got.cka[0][1] == pytest.approx(1.0, abs=1e-6) and got.cka[0][2] < 0.5
    assert got.gw[0][1] == pytest.approx(0.0, abs=1e-6) and got.gw[0][2] > got.gw[0][1]
    assert got.dims == {"a": 64, "b": 64, "c": 32} and got.n == 120


def test_a_teacher_report_shows_both_matrices(rows, tmp_path):
    pytest.importorskip("matplotlib")
    from manyheads.evaluate.diagnosis_report import write_diagnosis_report

    texts = [r["text"] for r in rows]
    noise = NoiseTrunk()
    teachers = [FakeTeacher("a", noise.encode), FakeTeacher("b", lambda t: noise.encode(t) * 2)]
    page = write_diagnosis_report(tmp_path, diagnose_teachers(texts, teachers, sample=40))
    html = page.read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == 2 and "<li>a, b</li>" in html
    assert json.loads((tmp_path / "report.json").read_text())["teachers"]["groups"] == [["a", "b"]]


def test_a_teacher_with_bad_features_is_named(rows):
    texts = [r["text"] for r in rows]
    teachers = [
        FakeTeacher("a", lambda t: np.ones((len(t), 3))),
        FakeTeacher("b", lambda t: np.ones((2, 3))),
    ]
    with pytest.raises(DataError, match=r"teacher 'b' gave features of shape \(2, 3\)"):
        diagnose_teachers(texts, teachers, sample=50)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda t: diagnose_trunks(t, {"s": ("multiclass", ["a", "b"] * 10)}, ["hashing"]), DataError, "task 's': 40 texts but 20 labels"),
        (lambda t: diagnose_trunks(t, {"s": ("tags", ["a", "b"] * 20)}, ["hashing"]), ConfigError, "kind must be one of"),
        (lambda t: diagnose_trunks(t, {}, ["hashing"]), ConfigError, "give at least one task"),
        (lambda t: diagnose_trunks(t, {"s": ("multiclass", ["a", "b"] * 20)}, []), ConfigError, "give at least one trunk"),
        (lambda t: diagnose_teachers(t, [FakeTeacher("a", np.ones)]), ConfigError, r"give at least two teachers \(teacher\) to compare, got 1"),
        (lambda t: diagnose_teachers(t, [FakeTeacher("a", np.ones)] * 2, threshold=0), ConfigError, r"threshold must be in \(0, 1\], got 0"),
        (lambda t: diagnose_teachers(t[:10], [FakeTeacher("a", np.ones), FakeTeacher("b", np.ones)]), DataError, "need at least 20 texts to compare teachers, got 10"),
    ],
)  # fmt: skip
def test_bad_diagnosis_inputs_get_one_line_errors(rows, call, error, message):
    with pytest.raises(error, match=message):
        call([r["text"] for r in rows[:40]])


# -- the command ----------------------------------------------------------------------


@pytest.fixture
def data_file(tmp_path: Path, rows) -> Path:
    keep = ("text", "section", "role", "library", "group")
    return write_jsonl(tmp_path / "rows.jsonl", [{k: r[k] for k in keep} for r in rows])


def run(capsys, *args: Any) -> tuple[int, str, str]:
    code = main(["diagnose", *(str(a) for a in args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_ranks_trunks_as_a_table_and_as_json(capsys, data_file):
    base = [data_file, "-t", "library:binary", "-t", "role:multilabel", "--trunk", "hashing",
            "--trunk", "tfidf", "--group-field", "group", "--sample", "200", "--no-cache"]  # fmt: skip
    code, out, err = run(capsys, *base, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mode"] == "trunks" and doc["n"] == 200
    assert set(doc["tasks"]) == {"library", "role"}
    assert sorted(doc["tasks"]["role"]["ranking"]) == ["hashing", "tfidf"]
    code, out, err = run(capsys, *base)
    assert code == 0, err
    assert "library (binary, 2 labels" in out and "rank  trunk" in out
    assert out.count("\n1  ") == 2  # a best trunk per task


def test_the_command_writes_a_report(capsys, data_file, tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "report"
    code, _, err = run(capsys, data_file, "-t", "library:binary", "--trunk", "hashing",
                       "--sample", "200", "--no-cache", "--report", folder)  # fmt: skip
    assert code == 0, err
    assert f"report: {folder / 'report.html'}" in err
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == 1 and 'id="task-library"' in page
    assert json.loads((folder / "report.json").read_text())["trunks"]["tasks"]["library"]


def test_the_command_compares_teachers(capsys, tmp_path, rows, data_file):
    pytest.importorskip("ot")
    texts = [r["text"] for r in rows[:200]]
    for trunk in ("hashing", "tfidf"):
        b = Bundle(trunk=trunk, cache=None)
        for head in ("library", "same"):  # two heads, one trunk
            b.fit_head(head, texts, [r["library"] for r in rows[:200]], kind="binary")
        b.save(tmp_path / trunk)
    h, t = tmp_path / "hashing", tmp_path / "tfidf"
    code, out, err = run(capsys, data_file, "--teacher", f"lib={h}#library",
                         "--teacher", f"same={h}#same", "--teacher", f"tf={t}#library",
                         "--sample", "100", "--threshold", "0.99", "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mode"] == "teachers" and doc["names"] == ["lib", "same", "tf"]
    assert doc["cka"][0][1] == pytest.approx(1.0)  # one trunk under both heads
    assert doc["cka"][0][2] < 0.99  # two trunks of character n-grams: alike, not the same
    assert doc["groups"] == [["lib", "same"], ["tf"]]
    code, out, err = run(capsys, data_file, "--teacher", f"lib={h}#library",
                         "--teacher", f"tf={t}#library", "--sample", "100")  # fmt: skip
    assert code == 0, err
    assert "linear CKA" in out and "suggested groups" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-t", "section", "--trunk", "nope"], "unknown trunk 'nope'"),
        (["-t", "nosuch", "--trunk", "hashing"], "no field 'nosuch' for head 'nosuch'"),
        (["-t", "section", "--teacher", "a=x", "--teacher", "b=y"], r"give tasks \(--task\) to rank trunks for, or teachers \(--teacher\) to compare, not both"),
        ([], r"give a task \(--task\) to rank trunks for, or teachers \(--teacher\) to compare"),
        (["-t", "section"], "give at least one --trunk to judge"),
        (["--teacher", "a=x", "--teacher", "b=y", "--trunk", "hashing"], r"--trunk is for ranking trunks on tasks \(--task\)"),
        (["--teacher", "a=x", "--teacher", "b=y", "--k", "5"], r"--k is for ranking trunks on tasks \(--task\)"),
        (["--teacher", "a=x"], r"give at least two teachers \(--teacher\) to compare, got 1"),
        (["--teacher", "a=x", "--teacher", "a=y"], r"--teacher names must be distinct, got \['a', 'a'\]"),
        (["--teacher", "ax", "--teacher", "b=y"], "bad --teacher 'ax': expected NAME=SOURCE"),
        (["--teacher", "a=nope", "--teacher", "b=y"], "teacher 'a': 'nope' is not a folder"),
        (["-t", "section", "--trunk", "hashing", "--threshold", "0.5"], r"--threshold groups teachers \(--teacher\)"),
        (["-t", "section", "--trunk", "hashing", "--trunk", "hashing"], r"--trunk names must be distinct"),
        (["-t", "section", "-t", "section", "--trunk", "hashing"], r"--task names must be distinct"),
        (["-t", "section", "--trunk", "hashing", "--sample", "5"], "--sample must be at least 20, got 5"),
        (["-t", "section", "--trunk", "hashing", "--k", "0"], "--k must be a positive integer, got 0"),
        (["-t", "section", "--trunk", "hashing", "--sample", "30", "--k", "30"], r"--k must be smaller than --sample \(30\), got 30"),
        (["-t", "section:tags", "--trunk", "hashing"], "bad --task 'section:tags'"),
    ],
)  # fmt: skip
def test_bad_options_get_one_line_errors(capsys, data_file, args, message):
    code, out, err = run(capsys, data_file, *args)
    assert code == 1 and out == ""
    assert err.startswith("manyheads: error: ") and err.count("\n") == 1
    assert re.search(message, err), err


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (lambda i: "same", "task 'section' has one of its labels only in the 40 rows read"),
        (lambda i: f"label{i}", "task 'section': every one of its labels has a single row in the 40 rows read; give more rows (or a larger sample)"),
    ],
)  # fmt: skip
def test_bad_labels_get_one_line_errors(capsys, tmp_path, rows, labels, message):
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [{"text": r["text"], "section": labels(i)} for i, r in enumerate(rows[:40])],
    )
    code, _, err = run(capsys, data, "-t", "section", "--trunk", "hashing", "--sample", "40")
    assert (code, err) == (1, f"manyheads: error: {message}\n")


def test_too_few_rows_get_one_line_error(capsys, tmp_path, rows):
    data = write_jsonl(
        tmp_path / "d.jsonl", [{"text": r["text"], "section": r["section"]} for r in rows[:10]]
    )
    code, _, err = run(capsys, data, "-t", "section", "--trunk", "hashing")
    assert code == 1 and err == "manyheads: error: need at least 20 rows to diagnose, got 10\n"
