"""Every linear head stacked into one matrix, applied with one matrix product.

Heads that are not linear (MLP heads) are applied one after the other on the
same embedding matrix, each as one batched forward pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, softmax

from .linear import LinearHead


class FusedHeads:
    """One GEMM for all heads, then per-head decoding.

    ``W`` is ``(d, total_outputs)``: each head's rows of ``coef_`` are divided
    by its temperature and laid side by side, so the logits that come out are
    already temperature-scaled.
    """

    def __init__(self, heads: Mapping[str, Any]) -> None:
        if not heads:
            raise ValueError("FusedHeads needs at least one head")
        dims = {h.n_features_in_ for h in heads.values()}
        if len(dims) != 1:
            raise ValueError(f"heads disagree on the embedding width: {sorted(dims)}")
        self.dim = dims.pop()
        self.names = list(heads)
        self.heads = dict(heads)
        self.linear = [n for n, h in self.heads.items() if isinstance(h, LinearHead)]
        self.others = [n for n in self.names if n not in self.linear]
        blocks, biases = [np.zeros((self.dim, 0), dtype=np.float32)], [np.zeros(0, np.float32)]
        self.slices: dict[str, slice] = {}
        col = 0
        for name in self.linear:
            head = self.heads[name]
            k = head.n_outputs_
            blocks.append(head.coef_.T / head.temperature_)
            biases.append(head.intercept_ / head.temperature_)
            self.slices[name] = slice(col, col + k)
            col += k
        self.W = np.ascontiguousarray(np.concatenate(blocks, axis=1), dtype=np.float32)
        self.b = np.concatenate(biases).astype(np.float32)
        # per-head cached label lists (JSON-ready Python values)
        self._labels = {n: h.classes_.tolist() for n, h in self.heads.items()}
        self._subsets: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, dict[str, slice]]] = {}

    def _subset(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, dict[str, slice]]:
        key = tuple(n for n in names if n in self.slices)
        if key == tuple(self.linear):
            return self.W, self.b, self.slices
        if key not in self._subsets:
            cols = np.concatenate([np.arange(self.W.shape[1])[self.slices[n]] for n in key])
            slices, col = {}, 0
            for n in key:
                k = self.slices[n].stop - self.slices[n].start
                slices[n] = slice(col, col + k)
                col += k
            self._subsets[key] = (
                np.ascontiguousarray(self.W[:, cols]),
                self.b[cols],
                slices,
            )
        return self._subsets[key]

    def probabilities(
        self, X: np.ndarray, names: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """``{head: probabilities}`` computed with a single matrix product."""
        names = list(self.names if names is None else names)
        W, b, slices = self._subset(names)
        X = X.astype(np.float32) if sp.issparse(X) else np.asarray(X, dtype=np.float32)
        Z = np.asarray(X @ W) + b if slices else None
        out: dict[str, np.ndarray] = {}
        for n in names:
            if n not in slices:  # a non-linear head: its own batched forward pass
                out[n] = self.heads[n].predict_proba(X)
                continue
            assert Z is not None
            z = Z[:, slices[n]]
            kind = self.heads[n].kind
            if kind == "multiclass":
                out[n] = softmax(z, axis=1)
            elif kind == "binary":
                p = expit(z[:, 0])
                out[n] = np.stack([1 - p, p], axis=1)
            else:
                out[n] = expit(z)
        return out

    def predict(self, X: np.ndarray, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Per text, ``{head: answer}`` in the shape documented on ``Bundle.predict``."""
        names = list(self.names if names is None else names)
        probs = self.probabilities(X, names)
        results: list[dict[str, Any]] = [{} for _ in range(X.shape[0])]
        for n in names:
            for row, answer in zip(results, self.decode(n, probs[n]), strict=True):
                row[n] = answer
        return results

    def decode(self, name: str, proba: np.ndarray) -> list[dict[str, Any]]:
        head = self.heads[name]
        labels = self._labels[name]
        rounded = np.round(proba.astype(np.float64), 6).tolist()
        if head.kind == "multilabel":
            on = (proba >= head.thresholds_).tolist()
            return [
                {
                    "labels": [lab for lab, hit in zip(labels, hits, strict=True) if hit],
                    "scores": dict(zip(labels, ps, strict=True)),
                }
                for hits, ps in zip(on, rounded, strict=True)
            ]
        if head.kind == "binary":
            positive = (proba[:, 1] >= head.thresholds_[0]).astype(int).tolist()
        else:
            positive = np.argmax(proba, axis=1).tolist()
        return [
            {"label": labels[k], "score": ps[k], "scores": dict(zip(labels, ps, strict=True))}
            for k, ps in zip(positive, rounded, strict=True)
        ]
