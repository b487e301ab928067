"""The fast n-gram trunk (``ngram``): its features against a plain Python reference,
batches and threads, fitting, specs and bundles."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from manyheads import Bundle
from manyheads.errors import ConfigError, ManyheadsError
from manyheads.trunks import load_trunk, spec_name
from manyheads.trunks.ngram import NgramTrunk, hashed_ngrams

TEXTS = [
    "Library for parsing XML files",
    "  Bibliothèque\tde\u00a0traitement  ",
    "",
    "x",
    "ÜBER große Straße 😀 emoji",
    "数据库 管理 工具",
    "a  b\n\nc",
    "İstanbul",
]

MASK = (1 << 64) - 1


def reference(text: str, dim: int, lo: int, hi: int) -> Counter[int]:
    """The n-gram buckets of one text, one n-gram at a time in plain Python."""
    chars = [" " if c.isspace() else c for c in text]
    padded = [" ", *chars, " "]
    shift = 64 - (dim.bit_length() - 1)
    out: Counter[int] = Counter()
    for size in range(lo, hi + 1):
        for i in range(len(padded) - size + 1):
            gram = padded[i : i + size]
            if any(c == " " for c in gram[1:-1]):
                continue
            if size == 1 and gram[0] == " ":
                continue
            if size == 2 and gram == [" ", " "]:
                continue
            h = 0
            for k, c in enumerate(gram):
                h = ord(c) + 1 if k == 0 else (h * 0x100000001B3 + ord(c) + 1) & MASK
            out[(((h ^ (size * 0x51ED27)) * 0x9E3779B97F4A7C15) & MASK) >> shift] += 1
    return out


@pytest.mark.parametrize(("dim", "lo", "hi"), [(2**14, 1, 5), (256, 2, 3), (2**16, 3, 3)])
def test_counts_match_the_reference(dim: int, lo: int, hi: int) -> None:
    indptr, indices, counts = hashed_ngrams(TEXTS, dim, (lo, hi))
    assert len(indptr) == len(TEXTS) + 1
    for i, text in enumerate(TEXTS):
        got = dict(
            zip(
                indices[indptr[i] : indptr[i + 1]].tolist(),
                counts[indptr[i] : indptr[i + 1]].tolist(),
                strict=True,
            )
        )
        assert got == dict(reference(text, dim, lo, hi)), text
    assert indptr[3] == indptr[2]  # the empty text has no n-gram


def test_whitespace_runs_read_as_one_boundary() -> None:
    a = NgramTrunk(idf=False).encode(["red  green\tblue"])
    b = NgramTrunk(idf=False).encode(["red green blue"])
    np.testing.assert_array_equal(a, b)


def test_batches_threads_and_length_order_give_the_same_rows() -> None:
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "δέλτα", "эпсилон", "ζ"]
    texts = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(0, 60, 300)]
    texts[7] = "word " * 400  # one long text among short ones
    whole = NgramTrunk(batch_size=4096, threads=1).fit(texts)
    pieces = NgramTrunk(batch_size=16, threads=2)
    pieces.load_state(whole.state())
    a, b = whole.encode_features(texts), pieces.encode_features(texts)
    assert (a != b).nnz == 0
    one = np.vstack([whole.encode([t]) for t in texts[:20]])
    np.testing.assert_allclose(one, a[:20].toarray(), rtol=1e-6)


def test_rows_are_unit_length_with_the_fitted_idf() -> None:
    trunk = NgramTrunk().fit(TEXTS)
    X = trunk.encode_features(TEXTS)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms[[0, 1, 3, 4, 5, 6, 7]], 1.0, rtol=1e-5)
    assert norms[2] == 0
    assert trunk.idf_ is not None and trunk.idf_.shape == (2**14,)
    assert trunk.fingerprint != NgramTrunk().fit(TEXTS[:3]).fingerprint


def test_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="ngram trunk dim must be a power of two"):
        NgramTrunk(dim=1000)
    with pytest.raises(ConfigError, match="ngram_range must satisfy"):
        NgramTrunk(ngram_range=(3, 2))
    with pytest.raises(ConfigError, match="ngram trunk threads must be 0 or more"):
        NgramTrunk(threads=-1)
    with pytest.raises(ManyheadsError, match="must be fitted on training texts first"):
        NgramTrunk().encode(["text"])
    with pytest.raises(ManyheadsError, match=r"needs an 'idf' vector of shape \(16384,\)"):
        NgramTrunk().load_state({"idf": np.ones(3, dtype=np.float32)})
    with pytest.raises(ManyheadsError, match="cannot fit the ngram trunk.s idf on zero texts"):
        NgramTrunk().fit([])
    with pytest.raises(ConfigError, match="unknown setting"):
        load_trunk({"type": "ngram", "colour": 1})


def test_spec_round_trip_and_names() -> None:
    trunk = load_trunk("ngram")
    assert isinstance(trunk, NgramTrunk) and trunk.name == "ngram"
    trunk.fit(TEXTS)
    again = load_trunk(trunk.spec(), state=trunk.state())
    assert again.fingerprint == trunk.fingerprint
    assert spec_name(trunk.spec()) == "ngram"
    assert NgramTrunk(dim=256).name == "ngram(dim=256,n=1-5)"
    # the tfidf preset is another trunk: its bundles keep their answers
    assert load_trunk("tfidf").spec()["type"] == "hashing"


def test_a_bundle_on_the_ngram_trunk_saves_and_loads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    texts = [f"{w} {i}" for i in range(40) for w in ("apple pie", "zebra crossing")]
    labels = [t.split()[0] for t in texts]
    bundle = Bundle(trunk="ngram", cache=None)
    bundle.fit_head("thing", texts, labels)
    bundle.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.trunk_name == "ngram"
    assert loaded.predict(["apple tart"]) == bundle.predict(["apple tart"])
    assert loaded.predict(["apple tart"])[0]["thing"]["label"] == "apple"
