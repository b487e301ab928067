"""The tree head (``head="tree"``): a label tree searched by beam, for extreme label
spaces. Real data: which Debian package (1,500 of them) a package's one-line summary
belongs to, learnt from the packages' full descriptions, on the `static` trunk (its
table distilled from MiniLM once for the module: those tests are marked heavy)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import write_jsonl

from manyheads import Bundle
from manyheads.cli import main
from manyheads.errors import ConfigError, DataError
from manyheads.heads import FusedHeads
from manyheads.heads import tree as tree_module
from manyheads.heads.convert import any_head_from_record, any_head_to_record
from manyheads.heads.record import HeadLimits
from manyheads.heads.tree import (
    KEEP,
    ROUTES,
    TWO_TREES_UP_TO,
    LabelTree,
    beam_search,
    check_forest,
    check_top_k,
    forest_tensors,
    pack_int4,
    roots,
    search,
    tree_count,
    unpack_int4,
)
from manyheads.heads.tree_fit import TreeHead, quantised
from manyheads.serve.payload import head_to_json


def _summary(text: str) -> str:
    return text.split(". ")[0]


@pytest.fixture(scope="module")
def static_cache(tmp_path_factory):
    """One cache folder for this module, so the `static` table is distilled once."""
    patch = pytest.MonkeyPatch()
    folder = tmp_path_factory.mktemp("static-cache")
    patch.setenv("MANYHEADS_CACHE_DIR", str(folder))
    yield folder
    patch.undo()


@pytest.fixture(autouse=True)
def _one_static_table(_isolated_cache, static_cache, monkeypatch):
    monkeypatch.setenv("MANYHEADS_CACHE_DIR", str(static_cache))


@pytest.fixture(scope="module")
def packages(static_cache, debian_rows):
    """A static-trunk bundle with a dense section head and a tree head over 1,500
    packages (labels), and the rows."""
    texts = [r["text"] for r in debian_rows]
    b = Bundle(trunk="static", cache=None)
    b.fit_head("section", texts, [r["section"] for r in debian_rows])
    b.fit_head("package", texts, [r["package"] for r in debian_rows], head="tree", val_fraction=0)
    return b, debian_rows


def _p_at(bundle: Bundle, rows: list[dict], k: int) -> float:
    got = bundle.predict([_summary(r["text"]) for r in rows], heads=["package"], scores=k)
    return float(
        np.mean([r["package"] in a["package"]["scores"] for r, a in zip(rows, got, strict=True)])
    )


@pytest.mark.heavy
def test_tree_head_finds_a_package_from_its_summary(packages):
    b, rows = packages
    probe = rows[:300]
    p1, p5 = _p_at(b, probe, 1), _p_at(b, probe, 5)
    # chance is 1 in 1,500; the labels' vectors alone (nearest mean) reach about the same
    assert p1 > 0.5, p1
    assert p5 >= p1
    spec = b.fused_heads.specs["package"]
    # 1,500 labels: two trees ("auto"), each a tree, not a flat head
    assert len(spec.trees) == 2 and all(t.n_inner > 1 for t in spec.trees)
    # every root's columns are fused
    assert spec.W1.shape[1] == sum(int(t.start[1]) for t in spec.trees)


@pytest.mark.heavy
def test_tree_and_dense_heads_answer_in_one_trunk_pass(packages, monkeypatch):
    b, rows = packages
    calls = []
    encode = b.trunk.encode
    monkeypatch.setattr(
        b.trunk, "encode", lambda texts, **kw: calls.append(1) or encode(texts, **kw)
    )
    got = b.predict([_summary(r["text"]) for r in rows[:20]])
    assert len(calls) == 1
    for answer in got:
        assert set(answer) == {"section", "package"}
        assert isinstance(answer["package"]["label"], str)
        assert len(answer["package"]["scores"]) == 5  # "all" keeps a tree head's best five
        scores = list(answer["package"]["scores"].values())
        assert scores == sorted(scores, reverse=True)
        assert answer["package"]["score"] == scores[0]


@pytest.mark.heavy
def test_tree_head_saves_loads_and_keeps_its_answers(packages, tmp_path):
    b, rows = packages
    probe = [_summary(r["text"]) for r in rows[:50]]
    b.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b", cache=None)
    assert loaded.predict(probe, scores=10) == b.predict(probe, scores=10)
    record = json.loads((tmp_path / "b" / "bundle.json").read_text())["heads"]["package"]
    assert record["type"] == "tree"
    assert "labels" in record and len(record["labels"]) == 1500


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("precision", "share", "agree"), [("int8", 0.6, 0.95), ("int4", 0.35, 0.8)]
)
def test_quantised_weights_agree_with_float16(packages, tmp_path, precision, share, agree):
    """int8 (a byte a weight) and int4 (two a byte) keep most of float16's answers at
    a fraction of its bytes, and survive a save and a load."""
    b, rows = packages
    half = b.heads["package"]
    X = b.embed([r["text"] for r in rows])
    small = TreeHead(precision=precision).fit(X, [r["package"] for r in rows])
    assert small.nbytes() < share * half.nbytes()
    assert small.trees_[0].dim == X.shape[1]
    probe = b.embed([_summary(r["text"]) for r in rows])
    a = np.asarray(half.predict_proba(probe).argmax(axis=1)).ravel()
    c = np.asarray(small.predict_proba(probe).argmax(axis=1)).ravel()
    assert (a == c).mean() > agree, (a == c).mean()
    copy = b.copy()
    copy.add_head("small", small)
    copy.save(tmp_path / "b")
    texts = [_summary(r["text"]) for r in rows[:30]]
    loaded = Bundle.load(tmp_path / "b", cache=None)
    assert loaded.predict(texts, heads=["small"]) == copy.predict(texts, heads=["small"])


def test_int4_packing_round_trips_and_refuses_a_width_it_cannot_group():
    q = np.random.default_rng(0).integers(-7, 8, size=(5, 6)).astype(np.int8)
    packed = pack_int4(q)
    assert packed.dtype == np.uint8 and packed.shape == (5, 3)
    np.testing.assert_array_equal(unpack_int4(packed), q.astype(np.float32))
    X = np.random.default_rng(1).normal(size=(40, 48)).astype(np.float32)
    with pytest.raises(ConfigError, match="needs vectors whose width is a multiple of 32"):
        TreeHead(precision="int4").fit(X, [f"l{i % 4}" for i in range(40)])


@pytest.mark.heavy
def test_record_round_trip_and_digest(packages):
    b, rows = packages
    head = b.heads["package"]
    record, tensors = any_head_to_record(head)
    assert tensors["weights"].dtype == np.float16
    again = any_head_from_record(record, tensors)
    X = b.embed([_summary(r["text"]) for r in rows[:30]])
    assert (head.predict_proba(X) != again.predict_proba(X)).nnz == 0


@pytest.mark.heavy
def test_multilabel_tree_head_answers_label_sets(debian_rows):
    rows = debian_rows[:600]
    texts = [r["text"] for r in rows]
    labels = [sorted({r["section"], *r["role"]}) for r in rows]
    b = Bundle(trunk="static", cache=None)
    summary = b.fit_head("tags", texts, labels, kind="multilabel", head="tree")
    for key in ("precision@1", "recall@5", "ndcg@3"):
        assert 0 < summary.metrics[key] <= 1
    got = b.predict(texts[:10], heads=["tags"])
    assert all(isinstance(a["tags"]["labels"], list) for a in got)
    assert sum(len(a["tags"]["labels"]) for a in got) > 0
    assert b.heads["tags"].route_ in ROUTES  # the path's weight, chosen on validation rows
    threshold = b.heads["tags"].threshold_
    for a in got:
        assert all(a["tags"]["scores"][lab] >= threshold for lab in a["tags"]["labels"])


@pytest.mark.heavy
def test_eval_reports_precision_recall_and_ndcg_at_k(packages, tmp_path):
    b, rows = packages
    probe = rows[:200]
    found = b.evaluate(
        [_summary(r["text"]) for r in probe],
        {"package": [r["package"] for r in probe], "section": [r["section"] for r in probe]},
        report=tmp_path / "report",
    )
    tree = found["package"]
    for k in (1, 3, 5):
        assert 0 <= tree[f"precision@{k}"] <= 1 and 0 <= tree[f"ndcg@{k}"] <= 1
    assert tree["recall@5"] >= tree["recall@1"] == tree["precision@1"] == tree["accuracy"]
    assert "macro_f1" in found["section"]  # the dense head keeps its metrics
    page = (tmp_path / "report" / "report.html").read_text()
    assert "precision@5" in page and 'id="head-package"' in page


@pytest.mark.heavy
@pytest.mark.heavy
def test_label_job_writes_each_rows_best_k(packages, tmp_path, capsys):
    b, rows = packages
    b.save(tmp_path / "b")
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": _summary(r["text"])} for r in rows[:20]])
    out = tmp_path / "out.jsonl"
    assert (
        main(["label", str(data), "-b", str(tmp_path / "b"), "-o", str(out), "--top-k", "7"]) == 0
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 20
    assert all(len(line["package"]["scores"]) == 7 for line in lines)
    # k past the head's answers: one line, nothing written
    bad = tmp_path / "bad.jsonl"
    assert (
        main(["label", str(data), "-b", str(tmp_path / "b"), "-o", str(bad), "--top-k", "101"]) == 1
    )
    err = capsys.readouterr().err.strip().splitlines()
    want = f"--top-k (head 'package') is 101; a tree head answers at most its best {KEEP}"
    assert err[-1] == f"manyheads: error: {want}"
    assert (
        main(["label", str(data), "-b", str(tmp_path / "b"), "-o", str(bad), "--top-k", "0"]) == 1
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "manyheads: error: --top-k must be a positive integer, got 0"
    assert not bad.exists()


def test_top_k_past_the_labels_is_refused():
    with pytest.raises(ConfigError, match="top_k is 20 but the head has only 12 labels"):
        check_top_k(20, 12)
    with pytest.raises(ConfigError, match="top_k must be a positive integer"):
        check_top_k(0, 12)


@pytest.mark.heavy
def test_labels_past_the_memory_bound_are_refused_before_any_trunk_pass(monkeypatch):
    b = Bundle(trunk="static", cache=None, limits=HeadLimits(max_tree_bytes=2**16))
    calls = []
    monkeypatch.setattr(b.trunk, "encode", lambda *a, **k: calls.append(1))
    texts = [f"text {i}" for i in range(200)]
    with pytest.raises(
        DataError, match=r"head 'big': a tree head \(2 trees\) of 200 labels on 256-wide"
    ):
        b.fit_head("big", texts, [str(i) for i in range(200)], head="tree")
    assert not calls and "big" not in b.heads
    with pytest.raises(DataError, match=r"10,000,000 labels .* \(the max_tree_bytes limit\)"):
        HeadLimits().check_tree(10_000_000, 384, "float16", "head 'big'")


@pytest.mark.heavy
def test_a_tree_head_refuses_sparse_vectors_and_bad_settings(debian_rows):
    texts = [r["text"] for r in debian_rows[:200]]
    b = Bundle(trunk="hashing", cache=None)
    with pytest.raises(ConfigError, match="a tree head learns from dense vectors"):
        b.fit_head("package", texts, [r["package"] for r in debian_rows[:200]], head="tree")
    with pytest.raises(ConfigError, match="a tree head is multiclass or multilabel, not 'binary'"):
        TreeHead(kind="binary").check_params()
    with pytest.raises(ConfigError, match="beam must be an integer >= 1"):
        TreeHead(beam=0).check_params()
    with pytest.raises(ConfigError, match="precision must be one of float16, int8, int4"):
        TreeHead(precision="int2").check_params()


def _small_tree() -> LabelTree:
    # root -> inner 1 (labels 0, 1), label 2
    start = np.array([0, 2, 4])
    children = np.array([1, 4, 2, 3])  # n_inner = 2: label j is node 2 + j
    weights = np.eye(4, 3, dtype=np.float16)
    return LabelTree(start, children, weights, None, np.zeros(4, np.float32), True)


def test_stored_tree_is_checked_in_one_line():
    good = _small_tree().tensors()
    LabelTree.check(good, 3, True)
    bad_cycle = dict(good, children=np.array([1, 4, 1, 3]))
    with pytest.raises(DataError, match="must each have one parent"):
        LabelTree.check(bad_cycle, 3, True)
    with pytest.raises(DataError, match="must be a float16, int8 or packed int4"):
        LabelTree.check(dict(good, weights=good["weights"].astype(np.float64)), 3, True)
    # int4: 64 weights a row packed in 32 bytes, two scales a row (one per 32 weights)
    packed = dict(good, weights=np.zeros((4, 32), np.uint8), scales=np.ones((4, 2), np.float32))
    assert LabelTree.check(packed, 3, True).dim == 64
    with pytest.raises(DataError, match="one row per child"):  # one scale a row: int8's
        LabelTree.check(dict(packed, scales=np.ones(4, np.float32)), 3, True)
    with pytest.raises(DataError, match="lack the tensor 'scales'"):
        LabelTree.check({k: v for k, v in packed.items() if k != "scales"}, 3, True)
    with pytest.raises(DataError, match="one row per child"):
        LabelTree.check(dict(good, bias=np.zeros(3, np.float32)), 3, True)
    with pytest.raises(DataError, match="lack the tensor 'start'"):
        LabelTree.check({k: v for k, v in good.items() if k != "start"}, 3, True)


def test_beam_search_matches_the_full_product_when_the_beam_holds_everything():
    tree = _small_tree()
    X = np.array([[2.0, 0.0, 1.0], [0.0, 3.0, 0.0]], dtype=np.float32)
    z = X @ tree.rows(0, 2) + tree.bias[:2]
    got = beam_search(tree, X, z, beam=5).toarray()
    # by hand: p(node 1) * softmax over labels 0, 1; p(label 2) at the root
    root = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    leaf_z = X @ tree.rows(2, 4)
    leaf = np.exp(leaf_z) / np.exp(leaf_z).sum(axis=1, keepdims=True)
    want = np.column_stack([root[:, 0] * leaf[:, 0], root[:, 0] * leaf[:, 1], root[:, 1]])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)
    none = beam_search(tree, X[:0], z[:0], beam=5)  # no texts: no rows, every label
    assert none.shape == (0, 3) and none.nnz == 0


@pytest.mark.parametrize("exclusive", [True, False])
@pytest.mark.parametrize("precision", ["float16", "int8"])
def test_beam_search_keeps_each_texts_best_labels_of_a_deep_uneven_tree(exclusive, precision):
    # a root over two inner nodes and a label; inner nodes over labels and further
    # inner nodes: labels at three depths, nodes of 2 to 5 children
    rng = np.random.default_rng(7)
    kids = {0: [1, 2, "L"], 1: [3, "L", "L"], 2: ["L", "L", 4, "L"], 3: ["L", "L"], 4: 5 * ["L"]}
    n_inner, n_labels = 5, sum(v.count("L") for v in kids.values())
    children, labels = [], iter(range(n_labels))
    for u in range(n_inner):
        children.append([c if c != "L" else n_inner + next(labels) for c in kids[u]])
    start = np.r_[0, np.cumsum([len(c) for c in children])]
    flat = np.concatenate(children)
    weights = rng.standard_normal((len(flat), 6)).astype(np.float32)
    bias = rng.standard_normal(len(flat)).astype(np.float32)
    tree = quantised(start, flat, weights, bias, exclusive, precision)
    X = rng.standard_normal((40, 6)).astype(np.float32)
    z_all = X @ tree.rows(0, len(flat)) + tree.bias
    route = 0.5
    # every label's score by hand: its path's log-probabilities, inner nodes' at `route`
    want = np.full((len(X), n_labels), -np.inf)

    def walk(u: int, score: np.ndarray) -> None:
        a, b = start[u], start[u + 1]
        z = z_all[:, a:b].astype(np.float64)
        if exclusive:
            logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        else:
            logp = -np.log1p(np.exp(-z))
        for j, c in enumerate(flat[a:b]):
            if c < n_inner:
                walk(int(c), score + route * logp[:, j])
            else:
                want[:, c - n_inner] = score + logp[:, j]

    walk(0, np.zeros(len(X)))
    keep = 4
    got = beam_search(tree, X, z_all[:, : start[1]], beam=10, keep=keep, route=route)
    assert got.has_canonical_format and (np.diff(got.indptr) == keep).all()
    best = np.sort(np.exp(want), axis=1)[:, -keep:]
    np.testing.assert_allclose(np.sort(got.toarray(), axis=1)[:, -keep:], best, rtol=1e-4)
    # a narrow beam scores fewer labels, each as the full search does
    narrow = beam_search(tree, X, z_all[:, : start[1]], beam=1, keep=keep, route=route)
    rows, cols = narrow.nonzero()
    np.testing.assert_allclose(narrow.data, np.exp(want[rows, cols]), rtol=1e-4)


@pytest.mark.heavy
def test_onnx_graph_holds_the_dense_heads_only(packages):
    b, _ = packages
    fused = b.fused_heads
    dense = fused.dense_only()
    assert dense is not None and dense.names == ["section"]
    assert fused.searches(["package"]) and not fused.searches(["section"])
    with pytest.raises(DataError, match="needs the vectors"):
        fused.from_first_layer(np.zeros((1, fused.W.shape[1]), np.float32), ["package"])


@pytest.mark.heavy
@pytest.mark.heavy
def test_a_tree_head_is_hot_added_to_a_running_service(packages, tmp_path, start_server):
    httpx = pytest.importorskip("httpx")
    b, rows = packages
    served = Bundle(trunk="static", cache=None)
    texts = [r["text"] for r in rows]
    served.fit_head("section", texts, [r["section"] for r in rows])
    served.save(tmp_path / "served")
    key = "tree-key-0123456789abcdef"
    (tmp_path / "keys.txt").write_text(key + "\n")
    srv = start_server(tmp_path / "served", "--api-key-file", str(tmp_path / "keys.txt"))
    auth = {"Authorization": f"Bearer {key}"}
    payload = head_to_json(*b.export_head("package"))
    res = httpx.put(srv.url + "/v1/heads/package", json=payload, headers=auth, timeout=60)
    assert res.status_code == 200, res.text
    probe = [_summary(r["text"]) for r in rows[:5]]
    got = httpx.post(
        srv.url + "/v1/predict", json={"texts": probe}, headers=auth, timeout=60
    ).json()["results"]
    want = b.predict(probe)
    assert [g["package"]["label"] for g in got] == [w["package"]["label"] for w in want]
    assert all("section" in g for g in got)


def test_head_auto_makes_a_tree_above_the_extreme_label_count():
    from manyheads.heads.head_types import EXTREME_LABELS, candidate_types

    assert candidate_types("auto", EXTREME_LABELS + 1) == ["tree"]
    assert "tree" not in candidate_types("auto", EXTREME_LABELS)
    assert candidate_types("tree", 3) == ["tree"]


@pytest.mark.heavy
def test_fused_heads_from_records_build_the_tree(packages):
    b, _ = packages
    record, tensors = b.export_head("package")
    fused = FusedHeads.from_records({"package": (record, tensors)})
    X = b.embed(["a library for parsing XML"])
    assert sp.issparse(fused.probabilities(X)["package"])


def test_label_vectors_must_fit(debian_rows):
    X = np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32)
    with pytest.raises(DataError, match="label_vectors must be one 8-d row per label"):
        TreeHead().fit(X, [str(i % 4) for i in range(20)], label_vectors=np.zeros((3, 8)))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"beam": 0}, "bad beam 0"),
        ({"route": 0}, "bad route 0"),
        ({"threshold": 2}, "bad threshold 2"),
    ],
)
@pytest.mark.heavy
def test_a_stored_tree_heads_search_settings_are_checked(packages, bad, message):
    b, _ = packages
    record, tensors = b.export_head("package")
    record = dict(record, params=dict(record["params"], **bad))
    with pytest.raises(DataError, match=f"head 'package': tree head record has a {message}"):
        FusedHeads.from_records({"package": (record, tensors)})


@pytest.mark.heavy
def test_a_tree_head_learns_the_labels_only_its_validation_rows_have(static_cache, debian_rows):
    rows = debian_rows[:300]
    b = Bundle(trunk="static", cache=None)
    b.fit_head(
        "package",
        [r["text"] for r in rows[:250]],
        [r["package"] for r in rows[:250]],
        head="tree",
        val_texts=[r["text"] for r in rows[250:]],
        val_labels=[r["package"] for r in rows[250:]],
    )
    known = set(b.heads["package"].classes_.tolist())
    assert {r["package"] for r in rows} <= known


def _other_tree() -> LabelTree:
    # the same three labels grouped the other way: root -> label 0, inner 1 (labels 1, 2)
    start = np.array([0, 2, 4])
    children = np.array([2, 1, 3, 4])
    weights = np.array([[1, 0, 1], [0, 1, 0], [0, 2, 0], [1, 0, 2]], dtype=np.float16)
    return LabelTree(start, children, weights, None, np.zeros(4, np.float32), True)


def test_a_forest_answers_the_mean_of_its_trees_probabilities():
    trees = (_small_tree(), _other_tree())
    X = np.array([[2.0, 0.0, 1.0], [0.0, 3.0, 0.0], [1.0, 1.0, 1.0]], dtype=np.float32)
    W, b = roots(trees)
    assert W.shape == (3, 4)  # each tree's root its own columns
    z = X @ W + b
    each = [
        beam_search(t, X, z[:, lo:hi], beam=5).toarray()
        for t, lo, hi in zip(trees, (0, 2), (2, 4), strict=True)
    ]
    assert not np.allclose(each[0], each[1])
    got = search(trees, X, z, beam=5).toarray()
    np.testing.assert_allclose(got, (each[0] + each[1]) / 2, rtol=1e-6)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)
    best = search(trees, X, z, beam=5, keep=1).toarray()  # each text's best label only
    assert ((best > 0).sum(axis=1) == 1).all()
    np.testing.assert_array_equal(best.argmax(axis=1), got.argmax(axis=1))
    assert search(trees, X[:0], z[:0], beam=5).shape == (0, 3)


def test_texts_searched_a_chunk_at_a_time_answer_as_at_once(monkeypatch):
    trees = (_small_tree(), _other_tree())
    X = np.random.default_rng(0).normal(size=(7, 3)).astype(np.float32)
    z = X @ roots(trees)[0] + roots(trees)[1]
    whole = search(trees, X, z, beam=5).toarray(), beam_search(trees[0], X, z[:, :2], 5).toarray()
    monkeypatch.setattr(tree_module, "_CHUNK", 3)  # chunks of 3, 3 and 1 texts
    chunked = search(trees, X, z, beam=5), beam_search(trees[0], X, z[:, :2], 5)
    for got, want in zip(chunked, whole, strict=True):
        assert got.format == "csr" and got.shape == want.shape
        np.testing.assert_allclose(got.toarray(), want, rtol=1e-6)


def test_a_record_without_a_tree_count_is_one_tree():
    """Records written before heads held several trees name no count: one tree."""
    record = {"type": "tree", "kind": "multiclass", "labels": ["a", "b", "c"], "params": {}}
    head = any_head_from_record(record, _small_tree().tensors())
    assert len(head.trees_) == 1 and head.trees == 1
    X = np.array([[2.0, 0.0, 1.0]], dtype=np.float32)
    assert head.predict_proba(X).shape == (1, 3)


def test_a_stored_forest_is_checked_in_one_line():
    trees = (_small_tree(), _other_tree())
    stored = forest_tensors(trees)
    assert {"start", "tree1.start", "tree1.weights"} <= set(stored)
    assert len(check_forest(stored, 3, True)) == 2
    skipped = {k.replace("tree1.", "tree2."): v for k, v in stored.items()}
    with pytest.raises(DataError, match=r"must hold trees 0 to k-1 .* found trees \[0, 2\]"):
        check_forest(skipped, 3, True)
    wide = dict(stored, **{"tree1.weights": np.zeros((4, 5), np.float16)})
    with pytest.raises(DataError, match="trees must all read vectors of one width"):
        check_forest(wide, 3, True)
    with pytest.raises(DataError, match="must each have one parent"):
        check_forest(dict(stored, **{"tree1.children": np.array([2, 1, 2, 4])}), 3, True)
    with pytest.raises(ConfigError, match="trees must be 'auto' or an integer from 1 to 8, got 9"):
        TreeHead(trees=9).check_params()
    assert [tree_count("auto", n) for n in (10, TWO_TREES_UP_TO, TWO_TREES_UP_TO + 1)] == [2, 2, 1]
    assert tree_count(3, 10**6) == 3
    with pytest.raises(DataError, match=r"\(2 trees\) of 10,000,000 labels"):
        HeadLimits().check_tree(10_000_000, 128, "int8", "head 'big'", trees=2)


@pytest.mark.heavy
def test_a_tree_head_of_two_trees_saves_loads_and_answers_their_mean(packages, tmp_path):
    b, rows = packages
    X = b.embed([r["text"] for r in rows])
    two = TreeHead(trees=2).fit(X, [r["package"] for r in rows])
    first, second = two.trees_
    assert not np.array_equal(first.children, second.children)  # grown from other seeds
    probe = b.embed([_summary(r["text"]) for r in rows[:60]])
    W, bias = roots(two.trees_)
    z = probe @ W + bias
    m = int(first.start[1])
    mean = (
        beam_search(first, probe, z[:, :m], two.beam).toarray()
        + beam_search(second, probe, z[:, m:], two.beam).toarray()
    ) / 2
    got = two.predict_proba(probe).toarray()
    kept = got > 0  # each text's best KEEP labels of the mean, at the mean's values
    assert (kept.sum(axis=1) == KEEP).all() and ((mean > 0).sum(axis=1) > KEEP).any()
    np.testing.assert_allclose(got[kept], mean[kept], rtol=1e-6)
    next_best = -np.sort(-mean, axis=1)[:, KEEP]
    assert (np.where(kept, got, np.inf).min(axis=1) >= next_best).all()
    copy = b.copy()
    copy.add_head("two", two)
    copy.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b", cache=None)
    texts = [_summary(r["text"]) for r in rows[:30]]
    assert loaded.predict(texts, heads=["two"], scores=10) == copy.predict(
        texts, heads=["two"], scores=10
    )
    assert len(loaded.fused_heads.specs["two"].trees) == 2
    record, tensors = copy.export_head("two")
    assert record["params"]["trees"] == 2
    for says in (3, "auto", True):  # the head and the fused product: one check, one line
        bad = dict(record, params=dict(record["params"], trees=says))
        match = f"record says {says!r} trees but its tensors hold 2"
        with pytest.raises(DataError, match=match):
            any_head_from_record(bad, tensors)
        with pytest.raises(DataError, match=match):
            FusedHeads.from_records({"two": (bad, tensors)})


@pytest.mark.heavy
def test_an_update_keeps_a_tree_heads_own_settings(static_cache, debian_rows, tmp_path):
    rows = debian_rows[:240]
    b = Bundle(trunk="static", cache=None)
    settings = {"beam": 4, "precision": "int8", "trees": 2}
    b.fit_head(
        "package", [r["text"] for r in rows[:180]], [r["section"] for r in rows[:180]],
        head="tree", **settings,
    )  # fmt: skip
    b.save(tmp_path / "b")
    fresh = rows[180:]
    b.add_feedback([r["text"] for r in fresh], {"package": [r["section"] for r in fresh]})
    (update,) = b.update_heads(margin=100.0, forget=1.0).heads
    assert update.promoted, update.reason
    head = Bundle.load(tmp_path / "b", cache=None).heads["package"]
    assert {k: getattr(head, k) for k in settings} == settings
