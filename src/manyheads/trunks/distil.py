"""Distilling a static token table from a transformer, and reading static model folders.

The method is model2vec's (``model2vec.distill``, whose distillation extra pins a
``transformers`` older than the one manyheads runs on, so it is done here with the
same steps): each token of the vocabulary goes through the transformer alone,
between the tokenizer's special tokens (``[CLS] token [SEP]``); the mean of the
outputs is the token's vector. The vectors are centred and projected on their
first 256 principal components (an eigendecomposition of the covariance, each
component's sign fixed so its largest score is positive: deterministic), and each
row is weighted by SIF, ``a / (a + p)``, with ``p`` a Zipf estimate of the
token's frequency from its rank in the vocabulary and ``a = 1e-4``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._text import loads_json
from ..errors import ManyheadsError, require
from .windows import special_span

if TYPE_CHECKING:
    from .transformer import TransformerTrunk

__all__ = ["DISTIL_SETTINGS", "distil", "read_static_folder"]

DISTIL_SETTINGS: dict[str, Any] = {"method": "model2vec", "pca_dims": 256, "sif": 1e-4, "v": 1}


def _pca(X: np.ndarray, dims: int) -> np.ndarray:
    """The scores of ``X`` on its first ``dims`` principal components (signs fixed)."""
    Xc = X - X.mean(axis=0)
    cov = (Xc.T @ Xc) / max(len(X) - 1, 1)
    _, vectors = np.linalg.eigh(cov)
    components = vectors[:, ::-1][:, : min(dims, X.shape[1])]
    scores = Xc @ components
    biggest = np.argmax(np.abs(scores), axis=0)
    return scores * np.sign(scores[biggest, np.arange(scores.shape[1])])


def sif_weights(rows: int, a: float) -> np.ndarray:
    """``a / (a + p)`` with ``p`` Zipf's estimate of the frequency of each rank."""
    inv_rank = 1.0 / np.arange(2, rows + 2)
    return a / (a + inv_rank / inv_rank.sum())


def distil(teacher: TransformerTrunk, *, batch_size: int = 1024) -> np.ndarray:
    """A (tokens x 256) float32 table distilled from ``teacher`` (torch is needed)."""
    torch = require("torch", "transformers")
    model = teacher.load_model()
    tok = teacher.tokenizer
    rows = tok.get_vocab_size(with_added_tokens=True)
    empty = tok.encode("", add_special_tokens=True)
    head, tail = special_span(empty)
    prefix, suffix = list(empty.ids[:head]), list(empty.ids[tail:])
    ids = np.concatenate(
        [
            np.tile(np.array(prefix, dtype=np.int64), (rows, 1)),
            np.arange(rows, dtype=np.int64)[:, None],
            np.tile(np.array(suffix, dtype=np.int64), (rows, 1)),
        ],
        axis=1,
    )
    out = np.zeros((rows, teacher.dim), dtype=np.float64)
    with torch.inference_mode():
        for start in range(0, rows, batch_size):
            batch = torch.from_numpy(ids[start : start + batch_size])
            hidden = model(input_ids=batch, attention_mask=torch.ones_like(batch)).last_hidden_state
            out[start : start + len(batch)] = hidden.float().mean(dim=1).numpy()
    out = np.nan_to_num(out)
    weights = sif_weights(rows, float(DISTIL_SETTINGS["sif"]))
    table = _pca(out, int(DISTIL_SETTINGS["pca_dims"])) * weights[:, None]
    return table.astype(np.float32)


def _tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(str(path))
    except (OSError, ValueError, SafetensorError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ManyheadsError(f"cannot read {path}: {first}") from None


def _modules(folder: Path) -> list[dict[str, Any]]:
    path = folder / "modules.json"
    if not path.is_file():
        return []
    try:
        modules = loads_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ManyheadsError(f"cannot read {path}: {exc}") from None
    return [m for m in modules if isinstance(m, dict)] if isinstance(modules, list) else []


def _table(tensors: dict[str, np.ndarray]) -> np.ndarray | None:
    """The table of a static model's tensors: sentence-transformers' ``embedding.weight``
    or model2vec's ``embeddings`` (with its per-token ``mapping`` and ``weights``)."""
    if "embedding.weight" in tensors:
        return tensors["embedding.weight"].astype(np.float32)
    if "embeddings" not in tensors:
        return None
    table = tensors["embeddings"].astype(np.float32)
    if "mapping" in tensors:  # model2vec's vocabulary quantisation: rows shared by tokens
        table = table[tensors["mapping"].astype(np.int64)]
    if "weights" in tensors:
        table = table * tensors["weights"].astype(np.float32)[:, None]
    return table


def read_static_folder(folder: Path) -> tuple[np.ndarray, str] | None:
    """``(table, tokenizer_json)`` of a model2vec folder or a sentence-transformers
    static model folder; ``None`` for any other folder (a transformer to distil)."""
    sub = folder
    for module in _modules(folder):
        if str(module.get("type", "")).endswith("StaticEmbedding"):
            sub = folder / str(module.get("path", ""))
            break
    else:
        if not (folder / "model.safetensors").is_file():
            return None
    model_file, tok_file = sub / "model.safetensors", sub / "tokenizer.json"
    table = _table(_tensors(model_file)) if model_file.is_file() else None
    if table is None or not tok_file.is_file():
        if sub == folder and not _modules(folder):
            return None  # a transformer's weights
        raise ManyheadsError(
            f"{sub} is a static model module without a table ('embedding.weight' or "
            "'embeddings' in model.safetensors) or without tokenizer.json"
        )
    return table, tok_file.read_text("utf-8")
