"""The linear solver: a sigmoid problem too big to solve at once is solved a block of
labels at a time, to the same optimum."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from manyheads.heads import solver
from manyheads.heads.solver import LinearSolution, fit_sigmoid


@pytest.fixture
def problem() -> tuple[sp.csr_matrix, np.ndarray]:
    rng = np.random.default_rng(0)
    X = sp.random(300, 500, density=0.03, format="csr", random_state=1, dtype=np.float32)
    Y = (np.asarray(X @ rng.normal(size=(500, 12))) > 0.2).astype(np.float32)
    return X, Y


def test_blocks_of_labels_reach_the_joint_optimum(problem, monkeypatch):
    X, Y = problem
    rng = np.random.default_rng(2)
    pos = rng.uniform(0.5, 2.0, size=Y.shape[1]).astype(np.float32)
    prior = LinearSolution(
        rng.normal(size=(Y.shape[1], X.shape[1])).astype(np.float32) * 0.01,
        rng.normal(size=Y.shape[1]).astype(np.float32),
        0,
    )
    options = {"C": 2.0, "pos_weight": pos, "prior": prior, "tol": 1e-7, "max_iter": 3000}
    joint = fit_sigmoid(X, Y, **options)
    monkeypatch.setattr(solver, "BLOCK_PARAMS", (X.shape[1] + 1) * 5)  # blocks of 5 labels
    blocks = fit_sigmoid(X, Y, **options)
    assert blocks.coef.shape == joint.coef.shape == (Y.shape[1], X.shape[1])
    np.testing.assert_allclose(blocks.coef, joint.coef, atol=2e-3)
    np.testing.assert_allclose(blocks.intercept, joint.intercept, atol=2e-3)
    # a warm start from the joint solution stays there, block by block
    again = fit_sigmoid(X, Y, **options, warm_start=joint)
    np.testing.assert_allclose(again.coef, joint.coef, atol=2e-3)
