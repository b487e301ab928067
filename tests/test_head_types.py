"""Head types as objects: one registry that the record's validator, the fused product,
the conversions and fitting ask, so that a new head type is one module and one line."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from manyheads import DataError
from manyheads.heads import FusedHeads
from manyheads.heads.head_types import HEAD_TYPE_REGISTRY, LinearType, head_type
from manyheads.heads.kinds import HEAD_TYPES, STORED_HEAD_TYPES
from manyheads.heads.record import check_record

RECORD = {"type": "linear", "kind": "multiclass", "labels": ["a", "b", "c"], "temperature": 2.0}
TENSORS = {"coef": np.eye(3, 4, dtype=np.float32), "intercept": np.zeros(3, dtype=np.float32)}


def test_the_registry_names_the_types_a_fit_takes():
    assert STORED_HEAD_TYPES == tuple(HEAD_TYPE_REGISTRY) == ("linear", "mlp", "tree")
    assert HEAD_TYPES == ("linear", "mlp", "tree", "auto")
    assert head_type("linear").takes_sparse and not head_type("mlp").takes_sparse
    assert head_type("tree").extreme and not head_type("linear").extreme


@pytest.mark.parametrize("bad", ["forest", None, 3])
def test_an_unknown_head_type_is_refused_in_one_line(bad):
    message = f"unknown head type {bad!r}; this version knows 'linear', 'mlp' and 'tree'"
    with pytest.raises(DataError) as info:
        head_type(bad)
    assert str(info.value) == message
    with pytest.raises(DataError) as info:
        check_record({**RECORD, "type": bad}, TENSORS)
    assert str(info.value) == message


def test_a_new_head_type_is_one_class_and_one_line(monkeypatch):
    class Doubled(LinearType):
        """A linear head whose logits count twice (a toy)."""

        name = "doubled"

        def layers(self, tensors: Mapping[str, np.ndarray], temperature: float):
            W1, b1, W2, b2 = super().layers(tensors, temperature)
            return 2 * W1, 2 * b1, W2, b2

    monkeypatch.setitem(HEAD_TYPE_REGISTRY, "doubled", Doubled())
    X = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    fused = FusedHeads.from_records(
        {"plain": (RECORD, TENSORS), "twice": ({**RECORD, "type": "doubled"}, TENSORS)}
    )
    probs = fused.probabilities(X)
    logits = X @ TENSORS["coef"].T / 2.0
    want = np.exp(2 * logits) / np.exp(2 * logits).sum(1, keepdims=True)
    np.testing.assert_allclose(probs["twice"], want, rtol=1e-5)
    assert fused.specs["twice"].type == "doubled"
