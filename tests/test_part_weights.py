"""Per-head part weights on composite trunks (``part_weights="auto"``)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from manyheads import Bundle
from manyheads.errors import ConfigError
from manyheads.heads.linear import LinearHead
from manyheads.train.parts import choose_multipliers, column_scale, fold_columns, scale_columns
from manyheads.trunks import CompositeTrunk, l2_normalise
from manyheads.trunks.ngram import NgramTrunk


class NoiseTrunk:
    """A trunk whose vectors say nothing of the text's meaning: a hash of it."""

    name, dim = "noise", 64

    @property
    def fingerprint(self) -> str:
        return "noise-v1"

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little") for t in texts]
        rows = [np.random.default_rng(s).normal(size=self.dim) for s in seeds]
        return l2_normalise(np.array(rows, dtype=np.float32).reshape(len(texts), self.dim))

    def spec(self) -> dict[str, Any]:
        return {"type": "noise"}


WORDS = {
    "db": ["database", "query", "index", "table", "sql"],
    "img": ["image", "pixel", "photo", "colour", "draw"],
    "net": ["network", "socket", "packet", "route", "proxy"],
}


def rows(n: int, seed: int, wrong: float = 0.0) -> tuple[list[str], list[str]]:
    """``n`` texts and their topics, a share ``wrong`` of the labels drawn at random."""
    rng = np.random.default_rng(seed)
    labels = [str(rng.choice(list(WORDS))) for _ in range(n)]
    filler = ["the", "a", "tool", "for", "and", "with", "fast", "small"]
    texts = [
        " ".join([*rng.choice(WORDS[y], 1), *rng.choice(filler, 6)][:: int(rng.choice([1, -1]))])
        for y in labels
    ]
    labels = [str(rng.choice(list(WORDS))) if rng.random() < wrong else y for y in labels]
    return texts, labels


def test_folded_coefficients_answer_the_trunks_own_vectors_as_the_scaled_ones() -> None:
    rng = np.random.default_rng(0)
    X = l2_normalise(rng.normal(size=(200, 10)))
    y = (X[:, 0] + 0.2 * X[:, 7] > 0).astype(int)
    scale = column_scale([6, 4], [1.0, 0.5], np.array([1.0, 4.0]))
    head = LinearHead(kind="binary").fit(scale_columns(X, scale), y)
    scaled = head.predict_proba(scale_columns(X, scale))
    head.coef_ = fold_columns(head.coef_, scale)
    np.testing.assert_allclose(head.predict_proba(X), scaled, rtol=1e-5, atol=1e-6)
    # the scaled vectors keep unit length
    w = np.array([1.0, 0.5]) / np.sqrt(1.25)
    Z = np.hstack([X[:, :6] / np.linalg.norm(X[:, :6], axis=1, keepdims=True) * w[0],
                   X[:, 6:] / np.linalg.norm(X[:, 6:], axis=1, keepdims=True) * w[1]])  # fmt: skip
    np.testing.assert_allclose(np.linalg.norm(scale_columns(Z, scale), axis=1), 1.0, rtol=1e-5)


def test_the_walk_finds_the_best_multiplier_of_each_part() -> None:
    base = np.random.default_rng(0).exponential(size=500)  # the rows' own losses

    def loss(m: np.ndarray) -> np.ndarray:  # every row gains alike: no noise
        return base + (np.log2(m[1]) + 2) ** 2 + np.log2(m[2]) ** 2

    best, tried = choose_multipliers(loss, 3)
    assert best.tolist() == [1.0, 0.25, 1.0]
    assert "1,1,1" in tried and "1,0.25,1" in tried
    # without improvement every multiplier stays 1
    assert choose_multipliers(lambda m: base, 2)[0].tolist() == [1.0, 1.0]


def test_a_gain_within_its_noise_moves_no_multiplier() -> None:
    """A step must lower the mean loss by more than NOISE standard errors of the paired
    per-row differences: a small gain that some rows make and others lose is not taken
    (0.01 against a standard error of 0.025), the same gain made by every row is."""
    rng = np.random.default_rng(0)
    base = rng.exponential(size=400)
    jitter = {}

    def noisy(m: np.ndarray) -> np.ndarray:  # mean gain 0.01 a step, row noise 0.5
        key = float(m[1])
        if key not in jitter:
            z = rng.normal(size=400)
            jitter[key] = 0.5 * (z - z.mean()) / z.std()  # exactly: mean 0, std 0.5
        return base - 0.01 * abs(np.log2(m[1])) + (jitter[key] if key != 1.0 else 0)

    assert choose_multipliers(noisy, 2)[0].tolist() == [1.0, 1.0]
    steady = choose_multipliers(lambda m: base - 0.01 * min(np.log2(m[1]), 1), 2)[0]
    assert steady.tolist() == [1.0, 2.0]


def test_a_head_turns_down_a_part_that_says_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # a fifth of the labels wrong: a loss left to lower (the clean task is learnt to a
    # validation loss of 0, where no step can gain beyond its noise)
    texts, labels = rows(400, 0, wrong=0.2)
    test_texts, test_labels = rows(300, 1)
    found = {}
    for mode in ("fixed", "auto"):
        trunk = CompositeTrunk([NgramTrunk(dim=1024), NoiseTrunk()])  # type: ignore[list-item]
        bundle = Bundle(trunk=trunk, cache=None)
        summary = bundle.fit_head("topic", texts, labels, C=1.0, part_weights=mode)
        answers = bundle.predict(test_texts)
        found[mode] = np.mean(
            [a["topic"]["label"] == y for a, y in zip(answers, test_labels, strict=True)]
        )
        if mode == "auto":
            chosen = summary.metrics["part_weights"]
            assert chosen["parts"] == ["ngram(dim=1024,n=1-5)", "noise"]
            assert chosen["multipliers"][0] == 1.0 and chosen["multipliers"][1] < 1.0
            assert len(chosen["tried"]) >= 2
            # the multipliers are folded in: the bundle's own vectors give the answers
            bundle.save(tmp_path / "b")
            loaded = Bundle.load(tmp_path / "b", trunk=trunk)
            assert loaded.predict(test_texts[:20]) == answers[:20]
        else:
            assert "part_weights" not in summary.metrics
    assert found["auto"] >= found["fixed"]


def test_one_line_errors() -> None:
    texts, labels = rows(40, 0)
    bundle = Bundle(trunk="ngram", cache=None)
    with pytest.raises(ConfigError, match="part_weights must be one of fixed, auto, got 'some'"):
        bundle.fit_head("topic", texts, labels, part_weights="some")
    # a trunk of one part has nothing to weigh: auto is fixed
    summary = bundle.fit_head("topic", texts, labels, part_weights="auto")
    assert "part_weights" not in summary.metrics
