from __future__ import annotations

import multiprocessing as mp
import re
from pathlib import Path

import numpy as np
import pytest

import manyheads
from manyheads import Bundle, ConfigError, EmbeddingCache
from manyheads.cache import default_cache_path


def test_put_get_round_trip_float16_and_float32(tmp_path):
    vecs = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
    for dtype, tol in (("float16", 1e-2), ("float32", 0)):
        cache = EmbeddingCache(tmp_path / f"{dtype}.sqlite", dtype=dtype)
        cache.put("fp", ["a", "b", "c"], vecs)
        got = cache.get("fp", ["c", "missing", "a"], dim=8)
        assert got[1] is None
        np.testing.assert_allclose(got[0], vecs[2], atol=tol)
        np.testing.assert_allclose(got[2], vecs[0], atol=tol)
        assert got[0].dtype == np.float32


def test_entries_are_keyed_by_fingerprint(cache):
    cache.put("fp1", ["a"], np.ones((1, 4)))
    assert cache.get("fp2", ["a"], dim=4) == [None]
    assert cache.count("fp1") == 1 and cache.count() == 1
    cache.clear("fp1")
    assert cache.count() == 0


def test_vector_of_other_width_counts_as_missing(cache):
    cache.put("fp", ["a"], np.ones((1, 4)))
    assert cache.get("fp", ["a"], dim=6) == [None]


def test_bad_dtype():
    with pytest.raises(ConfigError, match=r"cache dtype must be one of \['float16', 'float32'\]"):
        EmbeddingCache(dtype="int8")


def test_default_location_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MANYHEADS_CACHE_DIR", str(tmp_path / "mh"))
    assert default_cache_path() == tmp_path / "mh" / "embeddings.sqlite"
    monkeypatch.delenv("MANYHEADS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "manyheads" / "embeddings.sqlite"


def _writer(path: str, worker: int, rounds: int) -> None:
    cache = EmbeddingCache(path)
    rng = np.random.default_rng(worker)
    for r in range(rounds):
        texts = [f"text {i}" for i in range(r * 20, r * 20 + 40)]  # overlaps across workers
        cache.put("fp", texts, rng.normal(size=(len(texts), 16)))
        cache.get("fp", texts, dim=16)
    cache.close()


def test_two_processes_writing_at_once(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 25)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    cache = EmbeddingCache(path)
    expected = [f"text {i}" for i in range(24 * 20 + 40)]
    assert all(v is not None for v in cache.get("fp", expected, dim=16))
    assert cache.count("fp") == len(expected)


def test_second_head_on_same_texts_makes_no_trunk_call(counting_trunk, cache, debian_rows):
    rows = debian_rows[:300]
    texts = [r["text"] for r in rows]
    bundle = Bundle(trunk=counting_trunk, cache=cache)
    bundle.fit_head("section", texts, [r["section"] for r in rows])
    assert counting_trunk.calls == 1 and counting_trunk.texts == len(set(texts))
    bundle.fit_head("library", texts, [r["library"] for r in rows], kind="binary")
    bundle.fit_head("role", texts, [r["role"] for r in rows], kind="multilabel")
    assert counting_trunk.calls == 1  # both came from the cache


def test_retraining_every_head_with_warm_cache_makes_zero_trunk_calls(
    counting_trunk, tmp_path: Path, debian_rows
):
    rows = debian_rows[:300]
    texts = [r["text"] for r in rows]
    cache_path = tmp_path / "c.sqlite"
    first = Bundle(trunk=counting_trunk, cache=EmbeddingCache(cache_path))
    first.fit_head("section", texts, [r["section"] for r in rows])
    first.fit_head("role", texts, [r["role"] for r in rows], kind="multilabel")
    first.save(tmp_path / "b")
    calls_before = counting_trunk.calls
    # a new process would open the same cache file; emulate with a new cache object
    again = Bundle.load(tmp_path / "b", cache=EmbeddingCache(cache_path), trunk=counting_trunk)
    for name, info in again.head_info.items():
        field = info["field"]
        again.fit_head(name, texts, [r[field] for r in rows], kind=info["kind"])
    assert counting_trunk.calls == calls_before


def test_cache_hits_give_the_same_head_as_fresh_vectors(counting_trunk, cache, debian_rows):
    rows = debian_rows[:200]
    texts = [r["text"] for r in rows]
    labels = [r["section"] for r in rows]
    a = Bundle(trunk=counting_trunk, cache=cache)
    a.fit_head("s", texts, labels)
    b = Bundle(trunk=counting_trunk, cache=cache)
    b.fit_head("s", texts, labels)
    np.testing.assert_array_equal(a.heads["s"].coef_, b.heads["s"].coef_)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kind": "ordinal"}, "head kind must be one of multiclass, binary, multilabel"),
        ({"head": "forest"}, "head must be one of linear, mlp, tree, auto"),
        ({"thresholds": "recall"}, "thresholds must be one of"),
        ({"part_weights": "some"}, "part_weights must be one of fixed, auto"),
        ({"C": -1.0}, "C must be a positive number or 'auto'"),
        ({"class_weight": "heavy"}, "class_weight must be None, 'balanced' or a dict"),
        ({"groups": [1.5] * 12}, "group #0 is 1.5; a group is a string or an integer"),
        ({"labels": ["1", 1] * 6}, "a string and a number that read the same"),
        ({"name": "bad name"}, "invalid head name 'bad name'"),
        ({"labels": [f"l{i}" for i in range(12)], "max_labels": 5}, "the max_labels limit"),
    ],
)
def test_a_bad_head_costs_no_trunk_pass(counting_trunk, options, message):
    """Every setting of a head is judged before any text reaches the trunk."""
    from manyheads import HeadLimits

    options = dict(options)
    limits = HeadLimits(max_labels=options.pop("max_labels", 1000))
    bundle = Bundle(trunk=counting_trunk, cache=None, limits=limits)
    texts = [f"text number {i}" for i in range(12)]
    name = options.pop("name", "h")
    labels = options.pop("labels", ["a", "b"] * 6)
    kind = options.pop("kind", "multiclass")
    with pytest.raises(manyheads.ManyheadsError, match=re.escape(message)):
        bundle.fit_head(name, texts, labels, kind, **options)
    assert counting_trunk.calls == 0
