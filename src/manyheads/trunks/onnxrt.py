"""The ONNX runtime trunk: an exported graph run with onnxruntime, no torch.

An exported bundle's graph takes token ids, an attention mask and a
``window_weights`` matrix and gives the pooled, L2-normalised embedding of
each text and, when the bundle's trunk is a single transformer, every head's
probabilities (see :mod:`manyheads.export`). This module needs onnxruntime,
tokenizers and numpy only.

Texts are tokenised in one call (the tokenizers library runs it on all
cores), split into the same windows as the torch path (long texts are never
cut), sorted by length and grouped into batches under a token budget, so
little padding is computed. ``window_weights`` (texts x windows) averages the
windows of a long text inside the graph; for short texts it is the identity.

An int8 graph is run one text at a time instead, several texts side by side
(one thread each): onnxruntime's dynamic quantisation scales the activations
of a whole call at once, so in a batch a text's answer would depend on the
texts beside it (``OnnxTrunk.spread``).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from .._io import GRAPH_FILE
from ..errors import ConfigError, FingerprintMismatchError, ManyheadsError, require
from .base import Encoding, SpecFile, TrunkBase, check_texts, load_tokenizer_file
from .device import CPU, Device, DeviceLike, resolve_device
from .graph_spec import RUN_SETTINGS, GraphSpec
from .windows import WindowEncoding, length_batches, token_windows, window_work

EMBEDDING = "embedding"
HEAD_PREFIX = "probs/"
META_HEADS = "manyheads.heads"
# how a call is spread over the cores: "batches" of texts one after another, every
# core inside each; "texts" one at a time, side by side, a core each; "auto":
# "texts" for an int8 graph, "batches" otherwise
SPREADS = ("auto", "batches", "texts")


def cpu_threads() -> int:
    """Threads for onnxruntime: ``MANYHEADS_THREADS`` if set, else the usable CPU count."""
    env = os.environ.get("MANYHEADS_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ConfigError(f"MANYHEADS_THREADS must be a whole number, got {env!r}") from None
        if n < 1:
            raise ConfigError(f"MANYHEADS_THREADS must be at least 1, got {n}")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class SideBySide:
    """Threads that run onnxruntime calls side by side (onnxruntime lets go of the GIL
    while it runs), started on first use and started anew in a forked child, where the
    parent's threads are not."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._pool: Any = None
        self._pid = 0
        self._lock = threading.Lock()
        self.size = 1  # threads of the pool handed out last

    def pool(self, threads: int | None = None) -> Any:
        """The pool of ``threads`` (default: ``cpu_threads()``) threads, or None when
        that is one thread."""
        if self._pool is None or self._pid != os.getpid():
            threads = threads or cpu_threads()
            if threads <= 1:
                return None
            from concurrent.futures import ThreadPoolExecutor

            with self._lock:
                if self._pool is None or self._pid != os.getpid():
                    self._pool = ThreadPoolExecutor(threads, thread_name_prefix=self._prefix)
                    self._pid, self.size = os.getpid(), threads
        return self._pool


def read_graph(path: Path, sha256: str | None, *, hint: str = "") -> bytes:
    """The bytes of the graph file ``path``, checked against ``sha256`` (the one the
    bundle names; ``hint`` ends the refusal)."""
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise ManyheadsError(f"cannot read the ONNX graph {path}: {exc}") from exc
    if sha256 is not None and hashlib.sha256(blob).hexdigest() != sha256:
        raise FingerprintMismatchError(
            f"{path} is not the graph this bundle was saved with (its SHA-256 differs){hint}"
        )
    return blob


def open_session(
    path: Path,
    sha256: str | None,
    *,
    threads: int | None = None,
    hint: str = "; export the bundle again",
    device: Device = CPU,
) -> Any:
    """An onnxruntime session on the graph at ``path``, read once: checked against
    ``sha256`` (the one the bundle names; ``hint`` ends the refusal), then handed to
    onnxruntime; on the CPU, or on ``device`` through onnxruntime's CUDA execution
    provider (the CPU one beside it, for what CUDA does not run)."""
    ort = require("onnxruntime", "onnx")
    blob = read_graph(path, sha256, hint=hint)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or cpu_threads()
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    try:
        providers: list[Any] = ["CPUExecutionProvider"]
        if device.accelerated:
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": device.index}))
        return ort.InferenceSession(blob, options, providers=providers)
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ManyheadsError(f"cannot load the ONNX graph {path}: {exc}") from exc


def cuda_provider() -> bool:
    """Whether the onnxruntime installed runs graphs on CUDA GPUs."""
    ort = require("onnxruntime", "onnx")
    return "CUDAExecutionProvider" in ort.get_available_providers()


class _Described:
    """A read-only attribute of an :class:`OnnxTrunk`: the field ``field`` of the
    :class:`~manyheads.trunks.graph_spec.GraphSpec` it runs (``described``)."""

    def __init__(self, field: str) -> None:
        self.field = field

    def __get__(self, trunk: Any, owner: Any = None) -> Any:
        return self if trunk is None else getattr(trunk.described, self.field)

    def __set__(self, trunk: Any, value: Any) -> None:
        raise AttributeError(f"an ONNX trunk's {self.field} is read from its GraphSpec")


@dataclass(frozen=True)
class _Graph:
    """One opened graph: what a call needs, swapped whole on reload."""

    session: Any
    tokenizer: Any
    heads: Mapping[str, str]  # {head: digest} inside the graph
    widths: Mapping[str, int]  # output name -> width (0: dynamic)
    spread: str = "batches"  # "batches" or "texts": the session's thread count follows it


class OnnxTrunk(TrunkBase):
    """A trunk exported to ONNX, run by onnxruntime.

    Parameters
    ----------
    folder : path
        The exported bundle folder; the graph's ``file`` and ``tokenizer`` are
        relative to it.
    described : GraphSpec
        The graph as the spec describes it. Its ``fingerprint`` is the one of the
        trunk the graph was exported from: heads trained on that trunk work on this
        one. An int8 graph (``quantization``) gives slightly different vectors, so
        its embeddings are cached apart from the original trunk's (``cache_key``).
        Its ``recheck`` holds the int8 graph's float32 twin and each head's margin
        (written by the export): ``{"file", "sha256", "quantile", "heads": {name:
        {"digest", "margin"}}}``. The bundle answers texts some head is unsure of
        again with the float graph (:mod:`manyheads.bundle.recheck`); the trunk
        only keeps it.
    threads : int, optional
        onnxruntime intra-op threads (default: ``MANYHEADS_THREADS`` or the CPU count).
    batch_tokens, max_batch : int
        Token budget (padded) and row limit of one graph call.

    ``spread`` (set on the class or on a trunk): ``"batches"`` runs texts in
    length-sorted batches, one after another, every thread inside each;
    ``"texts"`` runs each text (with its windows) as a call of its own, calls
    side by side on ``threads`` one-thread sessions, so a text's answer never
    depends on the texts beside it; ``"auto"`` (default) is ``"texts"`` for an
    int8 graph, whose dynamic quantisation scales a whole call's activations
    at once (in batches ~5% of texts got another label on some head than alone), and
    ``"batches"`` for a float one (the same answers either way).
    """

    cacheable = True
    spread = "auto"
    type_name = "onnx"
    semantic = True
    exported = True
    runs_on = ("cpu", "cuda")
    keeps_files = True
    hashed_files = (GRAPH_FILE,)
    _not_settings = ("folder", "described")

    # the graph's settings, read from ``described``
    file = _Described("file")
    sha256 = _Described("sha256")
    tokenizer_file = _Described("tokenizer")
    max_length = _Described("max_length")
    overflow = _Described("overflow")
    quantization = _Described("quantization")
    recheck = _Described("recheck")

    @classmethod
    def spec_files(cls, options: dict[str, Any]) -> list[SpecFile]:
        recheck = options.get("recheck")
        twin = (
            [
                SpecFile(
                    "the float graph 'recheck.file'",
                    recheck.get("file"),
                    recheck.get("sha256"),
                    True,
                )
            ]
            if isinstance(recheck, dict)
            else []
        )
        return [
            SpecFile("the ONNX graph 'file'", options.get("file"), options.get("sha256"), True),
            SpecFile("the 'tokenizer' file", options.get("tokenizer", "tokenizer.json")),
            *twin,
        ]

    @classmethod
    def from_spec(cls, options: dict[str, Any], base: Path | None) -> TrunkBase:
        if base is None:
            raise ManyheadsError("an ONNX trunk is loaded from its bundle folder (Bundle.load)")
        run = {k: options.pop(k) for k in RUN_SETTINGS if k in options}
        return cls(base, GraphSpec(**options), **run)

    def __init__(
        self,
        folder: str | Path,
        described: GraphSpec,
        *,
        threads: int | None = None,
        batch_tokens: int = 1024,
        max_batch: int = 64,
    ) -> None:
        self.folder = Path(folder)
        self.described = described
        self._name = described.name
        self._fingerprint = str(described.fingerprint)
        self._dim = int(described.dim)
        self.source = dict(described.source or {})
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"threads must be a positive integer, got {threads!r}")
        self.threads = threads
        if batch_tokens < 1 or max_batch < 1:
            raise ConfigError("batch_tokens and max_batch must be positive")
        self.batch_tokens = int(batch_tokens)
        self.max_batch = int(max_batch)
        for rel in self._files():
            if not (self.folder / rel).is_file():
                raise ManyheadsError(f"the exported trunk lacks {self.folder / rel}")
        self._graph: _Graph | None = None
        self._lock = threading.Lock()
        self._side = SideBySide("manyheads-onnx")  # the threads of spread "texts"
        self._precise: OnnxTrunk | None = None
        self._device: Device = CPU

    @classmethod
    def _init_parameters(cls) -> list[Any]:
        """A spec's settings: the fields of :class:`GraphSpec` and how calls run."""
        import inspect

        return [*inspect.signature(GraphSpec).parameters.values(), *super()._init_parameters()]

    def _files(self) -> list[str]:
        """The files of this trunk in its folder: graph, tokenizer, the float twin."""
        twin = [self.recheck["file"]] if self.recheck else []
        return [self.file, self.tokenizer_file, *twin]

    # -- protocol ----------------------------------------------------------

    @property
    def cache_key(self) -> str:
        """Key of this trunk's vectors in the embedding cache."""
        if self.quantization:
            return f"{self._fingerprint}-{self.quantization}"
        return self._fingerprint

    def spec(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"recheck": self.recheck} if self.recheck else {}
        if self.overflow != "windows":  # the default is left out: earlier specs stay
            extra["overflow"] = self.overflow
        return {
            "type": "onnx",
            "name": self.name,
            "file": self.file,
            "tokenizer": self.tokenizer_file,
            "fingerprint": self._fingerprint,
            "dim": self._dim,
            "max_length": self.max_length,
            "sha256": self.sha256,
            "quantization": self.quantization,
            "source": self.source,
            **extra,
        }

    # -- where it runs -----------------------------------------------------

    @property
    def device(self) -> Device:
        return self._device

    def on_device(self, device: DeviceLike) -> OnnxTrunk:
        """This graph on ``device``: a GPU through onnxruntime's CUDA execution provider
        where the onnxruntime installed has it (the ``onnx-gpu`` extra), else the CPU."""
        device = resolve_device(device)
        if device.accelerated and not cuda_provider():
            device = CPU
        moved: OnnxTrunk = self._moved(
            device,
            _graph=None,
            _lock=threading.Lock(),
            _side=SideBySide("manyheads-onnx"),
            _precise=None,
        )
        return moved

    # -- session -----------------------------------------------------------

    def resolved_spread(self) -> str:
        """``"batches"`` or ``"texts"``: how calls are spread now (``spread`` resolved)."""
        if self.spread not in SPREADS:
            raise ConfigError(
                f"ONNX trunk spread must be one of {', '.join(SPREADS)}, got {self.spread!r}"
            )
        if self.spread == "auto":
            return "texts" if self.quantization == "int8" else "batches"
        return str(self.spread)

    def graph(self) -> _Graph:
        """The open graph (opened on first use): session, tokenizer and the heads inside,
        one immutable object, so a caller holding it never sees half of a reload. Opened
        anew when ``spread`` changed since (the session's thread count follows it)."""
        spread = self.resolved_spread()
        graph = self._graph
        if graph is None or graph.spread != spread:
            with self._lock:
                if self._graph is None or self._graph.spread != spread:
                    self._graph = self._open(spread)
                graph = self._graph
            if self.recheck:  # its float twin opens with it, not in the first unsure call
                self.precise().graph()
        return graph

    def reload(self, file: str, sha256: str) -> None:
        """Switch to another graph file of this folder (opened now, swapped in one step;
        calls already running finish on the graph they started with)."""
        old = self.described
        self.described = old.replace(file=file, sha256=sha256)
        try:
            graph = self._open(self.resolved_spread())
        except Exception:
            self.described = old
            raise
        with self._lock:
            self._graph = graph

    def _open(self, spread: str) -> _Graph:
        require("tokenizers", "onnx")
        threads = 1 if spread == "texts" else self.threads
        session = open_session(
            self.folder / self.file, self.sha256, threads=threads, device=self._device
        )
        tok = load_tokenizer_file(self.folder / self.tokenizer_file)
        meta = session.get_modelmeta().custom_metadata_map
        return _Graph(
            session=session,
            tokenizer=tok,
            heads=MappingProxyType(json.loads(meta.get(META_HEADS, "{}"))),
            widths=MappingProxyType(
                {
                    o.name: o.shape[1] if isinstance(o.shape[1], int) else 0
                    for o in session.get_outputs()
                }
            ),
            spread=spread,
        )

    def save_files(self, folder: Path) -> None:
        """Copy the graph and the tokenizer into ``folder`` (a bundle saved elsewhere)
        and read them from there on."""
        from .._io import atomic_write_bytes

        for rel in self._files():
            target = folder / rel
            if not target.exists():
                atomic_write_bytes(target, (self.folder / rel).read_bytes())
        self.folder = folder
        self._precise = None

    def precise(self) -> OnnxTrunk:
        """The float32 twin of this int8 graph (``recheck``), spread as this one is."""
        if not self.recheck:
            raise ManyheadsError("this ONNX trunk keeps no float graph to recheck with")
        twin = self._precise
        if twin is None:
            twin = OnnxTrunk(
                self.folder,
                self.described.replace(
                    file=self.recheck["file"],
                    sha256=self.recheck["sha256"],
                    quantization=None,
                    recheck=None,
                ),
                threads=self.threads,
                batch_tokens=self.batch_tokens,
                max_batch=self.max_batch,
            )
            twin._device = self._device
            self._precise = twin
        # spread as this graph is: one text per call answers a text whatever its batch
        twin.spread = self.resolved_spread()
        return twin

    def precise_twin(self) -> tuple[TrunkBase, Any] | None:
        return (self.precise(), self) if self.recheck else None

    def recheck_margins(self, heads: Mapping[str, str]) -> dict[str, float]:
        """``{head: margin}`` for those of ``heads`` (``{name: digest}``) whose margin
        was measured on that same head (digest)."""
        kept = self.recheck["heads"] if self.recheck else {}
        return {
            n: float(kept[n]["margin"])
            for n, digest in heads.items()
            if n in kept and kept[n]["digest"] == digest
        }

    def graph_heads(self) -> dict[str, str]:
        """``{head: digest}`` of the heads inside the graph."""
        return dict(self.graph().heads)

    def encode_with_heads(
        self, texts: Sequence[str], heads: Mapping[str, str]
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The embedding and the probabilities of those ``heads`` the graph holds with the
        same digest, from one run of one snapshot of the graph (a head changed since the
        graph was written is left to the caller)."""
        graph = self.graph()
        inside = [n for n, digest in heads.items() if graph.heads.get(n) == digest]
        out = self.run(texts, inside, graph=graph)
        return out.pop(EMBEDDING), out

    # -- running -----------------------------------------------------------

    def run(
        self,
        texts: Sequence[str],
        heads: Sequence[str] = (),
        *,
        graph: _Graph | None = None,
        progress: bool = False,
    ) -> dict[str, np.ndarray]:
        """Run the graph on ``texts``: ``{"embedding": ..., head: probabilities, ...}`` for
        the requested heads inside the graph (rows in the order of ``texts``). ``graph``:
        the snapshot to run (default: the current one)."""
        texts = check_texts(texts)
        graph = graph or self.graph()
        session, widths = graph.session, graph.widths
        names = [EMBEDDING] + [HEAD_PREFIX + h for h in heads]
        missing = [n for n in names if n not in widths]
        if missing:
            raise ManyheadsError(f"the ONNX graph has no output {missing[0]!r}")
        if not texts:
            return {
                n.removeprefix(HEAD_PREFIX): np.zeros((0, widths[n] or self._dim), np.float32)
                for n in names
            }
        windows, owners, weights = token_windows(
            graph.tokenizer, texts, self.max_length, self.overflow
        )
        lengths = np.fromiter((len(w) for w in windows), dtype=np.int64, count=len(windows))
        # one "row" per text: its windows travel together (averaged in the graph)
        n_windows = np.bincount(owners, minlength=len(texts))
        text_len = np.zeros(len(texts), dtype=np.int64)
        np.maximum.at(text_len, owners, lengths)
        first = np.concatenate([[0], np.cumsum(n_windows)[:-1]])
        out = {n: np.empty((len(texts), widths[n] or self._dim), dtype=np.float32) for n in names}
        pool = None
        if graph.spread == "texts":  # each text a call of its own, side by side
            batches = list(np.arange(len(texts))[:, None])
            pool = self._side.pool(self.threads) if len(texts) > 1 else None
        else:
            batches = length_batches(
                text_len * n_windows, max_tokens=self.batch_tokens, max_rows=self.max_batch
            )

        def one(batch: np.ndarray) -> int:
            # the windows of these texts, in order, padded to the longest
            win = np.concatenate([np.arange(first[t], first[t] + n_windows[t]) for t in batch])
            lens = lengths[win]
            mask = np.arange(int(lens.max()))[None, :] < lens[:, None]
            ids = np.zeros(mask.shape, dtype=np.int64)
            ids[mask] = np.concatenate([windows[j] for j in win])
            # texts x windows: each text's weighted windows (the identity for short texts)
            ww = np.zeros((len(batch), len(win)), dtype=np.float32)
            ww[np.repeat(np.arange(len(batch)), n_windows[batch]), np.arange(len(win))] = weights[
                win
            ]
            feed = {"input_ids": ids, "attention_mask": mask.astype(np.int64), "window_weights": ww}
            for name, arr in zip(names, session.run(names, feed), strict=True):
                out[name][batch] = arr  # rows of its own: threads never write the same ones
            return len(batch)

        from .._progress import progress_bar

        with progress_bar(total=len(texts), desc="encoding", enabled=progress) as bar:
            # onnxruntime lets go of the GIL while it runs
            for done in pool.map(one, batches) if pool is not None else map(one, batches):
                bar.update(done)
        return {n.removeprefix(HEAD_PREFIX): arr for n, arr in out.items()}

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        return self.run(texts, progress=progress)[EMBEDDING]

    # -- a step at a time --------------------------------------------------

    @property
    def work_unit(self) -> str:
        return "tokens"

    def work(self, texts: Sequence[str]) -> list[int]:
        """The tokens of each text's windows."""
        texts = check_texts(texts)
        windows, owners, _ = token_windows(
            self.graph().tokenizer, texts, self.max_length, self.overflow
        )
        return window_work(windows, owners, len(texts))

    def encoding(self, texts: Sequence[str]) -> Encoding:
        """``texts`` encoded a few windows at a time, each window a row of the graph (its
        own weight 1), their vectors averaged here as the graph averages them. An int8
        graph reads a text's windows in one call instead (one step: its dynamic
        quantisation scales a call's activations together, so windows run apart would
        give another answer)."""
        texts = check_texts(texts)
        if self.quantization:
            return super().encoding(texts)
        graph = self.graph()

        def run(windows: list[list[int]]) -> np.ndarray:
            lengths = np.fromiter((len(w) for w in windows), dtype=np.int64, count=len(windows))
            out = np.empty((len(windows), self._dim), dtype=np.float32)
            for batch in length_batches(
                lengths, max_tokens=self.batch_tokens, max_rows=self.max_batch
            ):
                mask = np.arange(int(lengths[batch].max()))[None, :] < lengths[batch][:, None]
                ids = np.zeros(mask.shape, dtype=np.int64)
                ids[mask] = np.concatenate([windows[j] for j in batch])
                feed = {
                    "input_ids": ids,
                    "attention_mask": mask.astype(np.int64),
                    "window_weights": np.eye(len(batch), dtype=np.float32),
                }
                out[batch] = graph.session.run([EMBEDDING], feed)[0]
            return out

        tokenized = token_windows(graph.tokenizer, texts, self.max_length, self.overflow)
        return WindowEncoding(tokenized, len(texts), self._dim, run)

    def __repr__(self) -> str:
        q = f", {self.quantization}" if self.quantization else ""
        return f"OnnxTrunk({str(self.folder / self.file)!r}{q})"
