"""The trunk protocol: texts in, L2-normalised float32 vectors out."""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, TypeAlias, runtime_checkable

import numpy as np

from .._text import unicode_problem
from ..errors import ConfigError, DataError, ManyheadsError
from .device import CPU, Device, DeviceLike, resolve_device

if TYPE_CHECKING:
    import scipy.sparse as sp


SEMANTIC_TRUNKS = ("minilm", "a transformer folder", "static", "an exported (ONNX) bundle")
"""The trunks that can make heads from label names, as messages name them."""


@runtime_checkable
class Trunk(Protocol):
    """What every trunk provides.

    ``name``
        Short human name (``"minilm"``, ``"hashing"``, a folder name).
    ``dim``
        Width of the vectors ``encode`` returns.
    ``fingerprint``
        Stable hash of the weights and every setting that changes the vectors.
        Heads are tied to it; the embedding cache is keyed by it.
    ``encode(texts)``
        ``float32`` array of shape ``(len(texts), dim)``, rows L2-normalised.
    ``spec()``
        JSON-serialisable description from which :func:`manyheads.load_trunk`
        rebuilds the same trunk (stored in ``bundle.json``).
    """

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def fingerprint(self) -> str: ...

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray: ...

    def spec(self) -> dict[str, Any]: ...


Features: TypeAlias = "np.ndarray | sp.csr_matrix"


def dense_rows(X: Features) -> np.ndarray:
    """``X`` as a dense float32 array (a sparse matrix made dense)."""
    return np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float32)


def stack_rows(a: Features, b: Features) -> Features:
    """The rows of ``a``, then those of ``b``: dense, or CSR when either is sparse."""
    import scipy.sparse as sparse

    if sparse.issparse(a) or sparse.issparse(b):
        return sparse.vstack([sparse.csr_matrix(a), sparse.csr_matrix(b)], format="csr")
    return np.concatenate([a, b])


class SpecFile(NamedTuple):
    """A file of the bundle folder that a trunk spec names: ``what`` it is (as messages
    say it), its ``path`` as the spec holds it, and whether the spec must pin it by its
    SHA-256 (``pinned``, the hash in ``sha256``)."""

    what: str
    path: Any
    sha256: Any = None
    pinned: bool = False


class TrunkBase:
    """The rest of the trunk protocol, with the answers of a plain trunk: every built-in
    trunk derives from it, and :func:`~manyheads.trunks.load_trunk` wraps a trunk object
    of your own (one that has only ``name``, ``dim``, ``fingerprint``, ``encode`` and
    ``spec``) so that every caller asks the same questions of every trunk.

    ``parts`` / ``part_weights`` / ``combine``
        A composite trunk's parts, their weights and how their vectors join; a plain
        trunk is its own one part.
    ``needs_fit`` / ``fit`` / ``state`` / ``load_state``
        Parts fitted on training texts (a TF-IDF idf): fitted once, their arrays
        stored in the bundle's weights file.
    ``cacheable`` / ``cache_key``
        Whether vectors go through the embedding cache, under which key.
    ``encode_features``
        The vectors as the heads take them: sparse (CSR) where the trunk is.
    ``encode_with_heads``
        The vectors and the probabilities of the heads the trunk's own graph
        computes (an exported bundle's graph holds its heads; others hold none).
    ``graph_heads``
        ``{head: digest}`` of the heads inside the trunk's graph; ``None`` for a
        trunk whose graph holds no heads.
    ``save_files`` / ``weights_in_graph``
        Files the trunk keeps in the bundle folder (a graph), and whether that
        graph already holds every weight (then the weights are stored once).
    ``tier``
        The nested embedding size a byte trunk serves; ``None`` for others.
    ``work_unit`` / ``work`` / ``encoding``
        What encoding a text costs (characters, or tokens for a trunk that runs a
        transformer on token windows), and the texts encoded a step at a time
        (:class:`Encoding`), so a caller can do other work between two steps of a
        long text; a plain trunk encodes a batch in one step.
    """

    _name: str
    _dim: int
    _fingerprint: str

    # -- the trunk type: what a spec of it holds, and what it can do -------
    # (read by the registry, :mod:`manyheads.trunks.registry`, without building one)

    type_name: ClassVar[str] = ""
    """The spec's ``type`` (``""``: a trunk that no spec names)."""
    tunable: ClassVar[bool] = False
    """A transformer whose weights fine-tuning changes and export writes to a graph."""
    exported: ClassVar[bool] = False
    """A graph exported from a tunable trunk (fine-tune and export its source instead)."""
    has_tiers: ClassVar[bool] = False
    """Serves nested embedding sizes (``tier``, ``tiers``, ``with_tier``)."""
    semantic: ClassVar[bool] = False
    """Maps texts of like meaning near each other (a transformer, static word vectors),
    so a head can be made from label names (``encode_labels``)."""
    keeps_files: ClassVar[bool] = False
    """Keeps files in the bundle folder (``save_files``), so saving builds it."""
    hashed_files: ClassVar[tuple[tuple[str, str], ...]] = ()
    """The kinds of files named by their content (``_io.hashed_name``) it writes."""
    runs_on: ClassVar[tuple[str, ...]] = ("cpu",)
    """The kinds of device it runs on (``"cuda"``: a GPU); asked to run on another, it
    stays on the CPU (:meth:`on_device`)."""
    _not_settings: ClassVar[tuple[str, ...]] = ()
    """Parameters of ``__init__`` that a spec never holds."""

    @classmethod
    def _init_parameters(cls) -> list[Any]:
        import inspect

        params = inspect.signature(cls.__init__).parameters.values()
        loose = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
        return [p for p in params if p.name != "self" and p.kind not in loose]

    @classmethod
    def spec_settings(cls) -> set[str]:
        """The settings a spec of this type may hold: ``__init__``'s parameters."""
        return {p.name for p in cls._init_parameters()} - set(cls._not_settings)

    @classmethod
    def spec_defaults(cls) -> dict[str, Any]:
        """The default of each setting that has a plain one (a spec's value must be of
        its type)."""
        names, plain = cls.spec_settings(), (bool, int, float, str)
        params = cls._init_parameters()
        return {
            p.name: p.default for p in params if p.name in names and isinstance(p.default, plain)
        }

    @classmethod
    def from_spec(cls, options: dict[str, Any], base: Path | None) -> TrunkBase:
        """The trunk of a spec's settings (``base``: the bundle folder). JSON lists are
        given back as tuples where ``__init__``'s default is one."""
        tuples = {p.name for p in cls._init_parameters() if isinstance(p.default, tuple)}
        return cls(
            **{
                k: tuple(v) if k in tuples and isinstance(v, list) else v
                for k, v in options.items()
            }
        )

    @classmethod
    def spec_files(cls, options: dict[str, Any]) -> list[SpecFile]:
        """The bundle folder's files that a spec of this type names (not its parts')."""
        return []

    @classmethod
    def spec_parts(cls, options: dict[str, Any]) -> list[Any]:
        """The specs of the parts a spec of this type holds (a composite's)."""
        return []

    @classmethod
    def spec_name(cls, options: dict[str, Any]) -> str | None:
        """The name ``load_trunk`` takes for this spec; ``None`` when no name gives it."""
        return None

    @property
    def name(self) -> str:
        """Short human name (``minilm``, ``tfidf``, a folder's name)."""
        return self._name

    @property
    def dim(self) -> int:
        """Width of the vectors."""
        return self._dim

    @property
    def fingerprint(self) -> str:
        """Hash of the weights and of every setting that changes the vectors."""
        return self._fingerprint

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        raise NotImplementedError

    def spec(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def parts(self) -> list[TrunkBase]:
        return [self]

    @property
    def part_weights(self) -> list[float]:
        """The weight each part's vector is joined with (``parts``, in order)."""
        return [1.0]

    def combine(self, blocks: Sequence[Features]) -> Features:
        """The trunk's vectors from its parts' (one block per part, in order)."""
        return blocks[0]

    @property
    def needs_fit(self) -> bool:
        return False

    def fit(self, texts: Sequence[str]) -> TrunkBase:
        return self

    def state(self) -> dict[str, np.ndarray]:
        return {}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        if state:
            raise ConfigError(
                f"the {self.name} trunk keeps no fitted arrays, got {', '.join(sorted(state))}"
            )

    cacheable: bool = True

    @property
    def cache_key(self) -> str:
        return self.fingerprint

    # -- where it runs -----------------------------------------------------

    @property
    def device(self) -> Device:
        """The device it runs on."""
        return CPU

    def on_device(self, device: DeviceLike) -> TrunkBase:
        """This trunk running on ``device`` where its type can (``runs_on``), else on
        the CPU: the trunk itself for one that runs only there. Same vectors, same
        fingerprint (within the precision the device computes in)."""
        return self

    def _moved(self, device: DeviceLike, **fresh: Any) -> Any:
        """This trunk, or where ``device`` is another than its own a shallow copy of it
        running there, its attributes ``fresh`` set anew (what it built for the old
        device: a model, a session)."""
        device = resolve_device(device)
        if device == self.device:
            return self
        other = copy.copy(self)
        for name, value in {"_device": device, **fresh}.items():
            setattr(other, name, value)
        return other

    @property
    def projects(self) -> bool:
        """Whether it computes the heads' first layer where it runs (on a GPU: only the
        product comes back, :meth:`encode_projected`)."""
        return False

    def encode_projected(
        self, texts: Sequence[str], weights: np.ndarray, bias: np.ndarray
    ) -> np.ndarray:
        """``encode(texts) @ weights + bias`` (float32), computed where the trunk runs."""
        return np.asarray(self.encode(texts) @ weights + bias, dtype=np.float32)

    def encode_features(self, texts: Sequence[str], *, progress: bool = False) -> Features:
        return self.encode(texts, progress=progress)

    @property
    def encodes_meaning(self) -> bool:
        """Whether label names can be encoded (:meth:`encode_labels`): the type's
        ``semantic``, or, for a composite, any part's."""
        return type(self).semantic

    @property
    def meaning_columns(self) -> tuple[int, int] | None:
        """The columns ``[start, stop)`` of :meth:`encode_features` that map texts by
        meaning (dense; a composite's first such part), or None."""
        return (0, int(self.dim)) if self.encodes_meaning else None

    def encode_labels(self, texts: Sequence[str]) -> np.ndarray:
        """Dense vectors of label names and descriptions in the space of
        :meth:`encode_features` (a composite's parts that do not encode meaning give
        zeros); a trunk that does not encode meaning is refused in one line."""
        if not self.encodes_meaning:
            raise ConfigError(
                f"trunk {self.name!r} cannot make heads from label names: it does not map "
                f"texts by meaning; trunks that can: {', '.join(SEMANTIC_TRUNKS)}, or a "
                "composite with one of them (e.g. minilm+tfidf)"
            )
        found = self.encode_features(check_texts(texts))
        return np.asarray(found.toarray() if hasattr(found, "toarray") else found, np.float32)

    def encode_with_heads(
        self, texts: Sequence[str], heads: Mapping[str, str]
    ) -> tuple[Features, dict[str, np.ndarray]]:
        """``(vectors, {head: probabilities})``: the probabilities of those of ``heads``
        (``{name: digest}``) that the trunk's graph computes with that digest."""
        return self.encode_features(texts), {}

    def graph_heads(self) -> dict[str, str] | None:
        return None

    def save_files(self, folder: Path) -> None:
        """Write the files this trunk keeps in a bundle folder (none for most trunks)."""

    def weights_in_graph(self) -> bool:
        return False

    @property
    def tier(self) -> int | None:
        return None

    @property
    def tiers(self) -> tuple[int, ...]:
        """The nested embedding sizes this trunk's weights serve (none: ``()``)."""
        return ()

    def with_tier(self, tier: int) -> TrunkBase:
        """The same weights serving nested size ``tier`` (a trunk with tiers)."""
        raise ConfigError(f"the {self.name} trunk has no tiers; tier {tier} cannot be served")

    def with_parts(self, parts: Sequence[TrunkBase]) -> TrunkBase:
        """This trunk with its parts (``parts``, in order) replaced: a plain trunk is its
        one part."""
        if len(parts) != 1:
            raise ConfigError(f"the {self.name} trunk has one part, got {len(parts)}")
        return parts[0]

    @property
    def model_folder(self) -> Path | None:
        """A model folder outside the bundle that this trunk reads (a transformer's)."""
        return None

    def precise_twin(self) -> tuple[TrunkBase, Any] | None:
        """``(this trunk with its int8 graph swapped for the float one, that int8
        part)``, or None when no part keeps a float graph to recheck with."""
        return None

    @property
    def work_unit(self) -> str:
        """``"characters"``, or ``"tokens"`` for a trunk that reads token windows."""
        return "characters"

    def work(self, texts: Sequence[str]) -> list[int]:
        """What encoding each text costs, in ``work_unit``: characters for a trunk cheap
        per character, the tokens of its windows for a transformer."""
        return [len(t) for t in texts]

    def encoding(self, texts: Sequence[str]) -> Encoding:
        """``texts`` encoded a step at a time: ``encoding(texts).finish()`` is
        ``encode_features(texts)``. A plain trunk takes one step."""
        return BatchEncoding(self, check_texts(texts))


class Encoding:
    """Texts encoded a step at a time (:meth:`TrunkBase.encoding`).

    ``work`` is what the whole costs (in the trunk's ``work_unit``) and ``left``
    what is not done yet; ``step(budget)`` encodes pieces worth at most
    ``budget`` (always at least one piece) and returns the work it did; once
    ``done``, ``result()`` gives the vectors, as ``encode_features`` gives them.
    ``divisible``: whether it can take more than one step at all.
    """

    work: int
    left: int

    @property
    def divisible(self) -> bool:
        return False

    @property
    def done(self) -> bool:
        raise NotImplementedError

    def step(self, budget: int) -> int:
        raise NotImplementedError

    def result(self) -> Features:
        raise NotImplementedError

    def finish(self) -> Features:
        """Every step left, at once; the vectors."""
        while not self.done:
            self.step(sys.maxsize)
        return self.result()

    def _not_done(self) -> ManyheadsError:
        return ManyheadsError(f"the encoding is not done: {self.left} of {self.work} work left")


class BatchEncoding(Encoding):
    """A plain trunk's encoding: one step, the whole batch."""

    def __init__(self, trunk: TrunkBase, texts: list[str]) -> None:
        self._trunk, self._texts = trunk, texts
        self.work = int(sum(trunk.work(texts)))
        self.left = self.work
        self._result: Features | None = None

    @property
    def done(self) -> bool:
        return self._result is not None

    def step(self, budget: int) -> int:
        if self._result is None:
            self._result = self._trunk.encode_features(self._texts)
        work, self.left = self.left, 0
        return work

    def result(self) -> Features:
        if self._result is None:
            raise self._not_done()
        return self._result


class TrunkAdapter(TrunkBase):
    """A trunk object of your own that follows :class:`Trunk`, with the rest of the
    protocol answered as for a plain trunk."""

    def __init__(self, trunk: Trunk) -> None:
        self.trunk = trunk
        self._name, self._dim, self._fingerprint = trunk.name, int(trunk.dim), trunk.fingerprint

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        return self.trunk.encode(texts, batch_size=batch_size, progress=progress)

    def spec(self) -> dict[str, Any]:
        return self.trunk.spec()

    def __repr__(self) -> str:
        return repr(self.trunk)


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes (hex), read a piece at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation; all-zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    return x / norms


def config_fingerprint(kind: str, config: dict[str, Any], *extra: bytes) -> str:
    """Hash of a trunk kind, its JSON config and any extra bytes (weights digests)."""
    h = hashlib.sha256()
    h.update(kind.encode())
    h.update(json.dumps(config, sort_keys=True, separators=(",", ":")).encode())
    for chunk in extra:
        h.update(chunk)
    return h.hexdigest()[:16]


class CheckedTexts(list[str]):
    """Texts :func:`check_texts` has judged: a list of valid Unicode strings. Passed on
    (to the embedding, the trunk and its parts), it is not judged again."""


def check_texts(texts: Sequence[str]) -> list[str]:
    """Validate a batch of texts: a sequence of ``str`` (a bare string is refused), each
    valid Unicode (no lone surrogates). Returns them as :class:`CheckedTexts` (a new
    list); texts that already are pass without being read again."""
    if isinstance(texts, CheckedTexts):
        return CheckedTexts(texts)
    if isinstance(texts, str | bytes):
        raise DataError("texts must be a list of strings, not a single string")
    out = CheckedTexts(texts)
    _judge_texts(out)
    return out


def _judge_texts(texts: list[str]) -> None:
    """A :class:`DataError` naming the first of ``texts`` that is not a ``str`` UTF-8
    holds (one look at them all when every one is)."""
    try:
        "".join(texts).encode("utf-8")
        return
    except (TypeError, UnicodeEncodeError):
        pass  # find the first text that is not, for its message
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise DataError(f"text #{i} is {type(t).__name__}, expected str")
        problem = unicode_problem(t)
        if problem is not None:
            raise DataError(f"text #{i} {problem}")


def load_tokenizer_file(path: Path) -> Any:
    """A ``tokenizers`` tokenizer from its ``tokenizer.json`` (no truncation, no
    padding); an unreadable or malformed file is one line naming it."""
    return tokenizer_from(str(path), f"the tokenizer {path}", text=False)


def tokenizer_from(source: str, what: str, *, text: bool = True) -> Any:
    """A ``tokenizers`` tokenizer from its JSON text (``text``) or file path, without
    truncation or padding; a malformed one is one line: ``cannot read {what}: ...``."""
    from ..errors import require

    tokenizers = require("tokenizers", "transformers")
    try:
        tok = (
            tokenizers.Tokenizer.from_str(source)
            if text
            else tokenizers.Tokenizer.from_file(source)
        )
    except Exception as exc:  # tokenizers raises plain Exception for a bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ManyheadsError(f"cannot read {what}: {first}") from None
    tok.no_truncation()
    tok.no_padding()
    return tok
