from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from manyheads import Bundle, BundleError, ConfigError, HashingTrunk, LinearHead, ManyheadsError
from manyheads.bundle import BUNDLE_JSON
from manyheads.trunks import CompositeTrunk, TransformerTrunk, load_trunk

TEXTS = ["a python library for xml", "fonts for the web", "kernel driver for network cards"]


def test_idf_hashing_must_be_fitted_and_fit_changes_fingerprint():
    trunk = HashingTrunk(dim=256, idf=True)
    assert trunk.needs_fit
    with pytest.raises(ManyheadsError, match="must be fitted on training texts first"):
        trunk.encode(TEXTS)
    trunk.fit(TEXTS)
    fp = trunk.fingerprint
    assert not trunk.needs_fit
    other = HashingTrunk(dim=256, idf=True).fit([*TEXTS, "something else entirely"])
    assert other.fingerprint != fp
    X = trunk.encode_sparse(TEXTS)
    assert sp.issparse(X) and X.shape == (3, 256)
    np.testing.assert_allclose(np.sqrt(X.multiply(X).sum(axis=1)).A1, 1.0, rtol=1e-5)


def test_idf_downweights_common_ngrams():
    texts = [f"common words here {w}" for w in ("alpha", "beta", "gamma", "delta")]
    plain = HashingTrunk(dim=4096, ngram_range=(3, 3), signed=False).encode(texts)
    idf = HashingTrunk(dim=4096, ngram_range=(3, 3), idf=True).fit(texts).encode(texts)
    # texts share most n-grams: idf makes them less alike
    assert idf[0] @ idf[1] < plain[0] @ plain[1]


def test_idf_state_round_trip():
    trunk = HashingTrunk(dim=128, idf=True).fit(TEXTS)
    again = load_trunk(json.loads(json.dumps(trunk.spec())), state=trunk.state())
    assert again.fingerprint == trunk.fingerprint
    np.testing.assert_array_equal(again.encode(TEXTS), trunk.encode(TEXTS))
    with pytest.raises(ManyheadsError, match=r"needs an 'idf' vector of shape \(128,\), got None"):
        load_trunk(trunk.spec(), state={"other": np.zeros(3)})


def test_composite_concatenates_weighted_unit_vectors(tiny_model_dir: Path):
    dense = TransformerTrunk(tiny_model_dir)
    hashing = HashingTrunk(dim=64)
    trunk = CompositeTrunk([dense, hashing], [1.0, 0.5])
    assert trunk.dim == 32 + 64 and trunk.name.endswith("@1+hashing@0.5")
    X = trunk.encode_features(TEXTS)
    assert sp.issparse(X)
    dense_x = trunk.encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(dense_x, axis=1), 1.0, rtol=1e-5)
    # part norms follow the weights: 1 : 0.5
    a = np.linalg.norm(dense_x[:, :32], axis=1)
    b = np.linalg.norm(dense_x[:, 32:], axis=1)
    np.testing.assert_allclose(a / b, 2.0, rtol=1e-4)
    assert CompositeTrunk([dense, hashing], [1.0, 0.4]).fingerprint != trunk.fingerprint


def test_composite_names_and_errors(tiny_model_dir: Path):
    trunk = load_trunk(f"{tiny_model_dir}@2+hashing@0.5")
    assert isinstance(trunk, CompositeTrunk) and trunk.weights == [2.0, 0.5]
    assert load_trunk(trunk.spec()).fingerprint == trunk.fingerprint
    with pytest.raises(ManyheadsError, match="weight 'x' of part 'hashing' is not a number"):
        load_trunk("hashing@x+tfidf")
    with pytest.raises(ManyheadsError, match="empty part between"):
        load_trunk("hashing++tfidf")
    with pytest.raises(ConfigError, match="a composite trunk needs at least 2 parts, got 1"):
        CompositeTrunk([HashingTrunk()])
    with pytest.raises(ConfigError, match=r"trunk part weights must be positive, got \[1.0, 0.0\]"):
        CompositeTrunk([HashingTrunk(), HashingTrunk(dim=64)], [1.0, 0.0])


def test_sparse_features_fit_the_same_head_as_dense():
    X = HashingTrunk(dim=512).encode_sparse(
        [f"text number {i} about {w}" for i in range(60) for w in ("fonts", "python")]
    )
    y = ["a", "b"] * 60
    sparse = LinearHead(calibrate=False, tol=1e-6).fit(X, y)
    dense = LinearHead(calibrate=False, tol=1e-6).fit(X.toarray(), y)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, atol=1e-4)
    np.testing.assert_allclose(sparse.predict_proba(X), dense.predict_proba(X.toarray()), atol=1e-4)


@pytest.mark.heavy
def test_bundle_fits_composite_trunk_once_and_saves_its_state(
    tiny_model_dir: Path, tmp_path: Path, debian_rows, cache
):
    rows = debian_rows[:300]
    texts = [r["text"] for r in rows]
    trunk = f"{tiny_model_dir}+tfidf"
    b = Bundle(trunk=trunk, cache=cache)
    assert b.trunk_needs_fit
    with pytest.raises(BundleError, match="must be fitted on training texts first"):
        b.embed(["x"])
    b.fit_head("section", texts, [r["section"] for r in rows])
    assert not b.trunk_needs_fit
    fp = b.trunk_fingerprint
    b.fit_head("library", texts[:100], [r["library"] for r in rows[:100]], kind="binary")
    assert b.trunk_fingerprint == fp  # frozen: later heads reuse it
    with pytest.raises(BundleError, match="already fitted and frozen"):
        b.fit_trunk(texts)
    # only the transformer part goes through the cache; the hashing part is recomputed
    assert cache.count() == len(set(texts))
    b.save(tmp_path / "b")
    doc = json.loads((tmp_path / "b" / BUNDLE_JSON).read_text())
    assert doc["trunk"]["spec"]["type"] == "composite" and doc["trunk"]["fingerprint"] == fp
    loaded = Bundle.load(tmp_path / "b", cache=None)
    assert loaded.predict(texts[:5]) == b.predict(texts[:5])
    assert loaded.trunk.fingerprint == fp


def test_a_composite_with_a_transformer_part_answers_a_step_at_a_time(
    tiny_st_dir: Path, debian_rows
):
    """Its steps are the transformer part's windows (the tf-idf part, cheap per
    character, costs nothing beside them); the answers are predict's."""
    rows = debian_rows[:60]
    b = Bundle(trunk=f"{tiny_st_dir}+tfidf", cache=None)
    b.fit_head("section", [r["text"] for r in rows], [r["section"] for r in rows])
    long = " ".join(r["text"] for r in rows[:8])
    assert b.trunk.work_unit == "tokens"
    assert b.trunk.work([long]) == b.trunk.parts[0].work([long])
    steps = b.predict_steps([long, "fonts for the web"])
    n = 0
    while not steps.done:
        steps.step(64)  # four windows a step
        n += 1
    assert steps.divisible and n > 20
    got, want = steps.answers(), b.predict([long, "fonts for the web"])
    assert [g["section"]["label"] for g in got] == [w["section"]["label"] for w in want]
    for g, w in zip(got, want, strict=True):
        for label, score in w["section"]["scores"].items():
            assert g["section"]["scores"][label] == pytest.approx(score, abs=1e-6)
