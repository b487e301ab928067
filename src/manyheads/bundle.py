"""A bundle: one trunk reference plus named heads, saved as a folder.

Layout::

    BUNDLE/
      bundle.json         format version, trunk (name, fingerprint, dim, spec), heads' metadata
      heads.safetensors   every head's weights (tensors ``heads/NAME/coef``, ``.../intercept``)

Saves are atomic: each file is written to a temp file, fsynced and renamed.
``heads.safetensors`` also carries a copy of the ``bundle.json`` it belongs to
(with a generation id), and is renamed first: a crash between the two renames
leaves a folder that still loads, as the new bundle. Files the new bundle no
longer names go only after both renames.

Saves hold the folder's writers' lock and merge: a bundle saved into the
folder it was loaded from, which another writer saved meanwhile, lays its own
head changes (added, replaced, removed heads) onto what is on disk now, so no
head another writer saved is lost; a change of trunk on either side cannot be
merged and is refused (:class:`~manyheads.errors.BundleConflictError`).
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import hashlib
import json
import os
import re
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import scipy.sparse as sp

from . import __version__
from ._io import atomic_write_bytes, atomic_write_text, describe_os_error, staged_dir
from ._text import unicode_problem
from .cache import EmbeddingCache
from .data import split_indices
from .errors import (
    BundleConflictError,
    BundleError,
    ConfigError,
    DataError,
    FingerprintMismatchError,
    UnknownHeadError,
)
from .heads import AnyHead, FusedHeads, any_head_from_record, any_head_to_record
from .heads.record import HeadLimits, check_label_values, label_problem
from .store import (
    BUNDLE_JSON,
    DATA_DIR,
    HEADS_FILE,
    TIERS_DIR,
    OnDisk,
    collect_garbage,
    folder_lock,
    has_bundle,
    read_document,
    read_folder,
)

if TYPE_CHECKING:
    from .heads.linear import LinearHead
from .trunks import CompositeTrunk, Trunk, check_spec, load_trunk, spec_name
from .trunks.base import check_texts

__all__ = [
    "BUILTIN_BUNDLES",
    "FORMAT_VERSION",
    "Bundle",
    "FinetuneSummary",
    "HeadLimits",
    "HeadSummary",
    "bundle_folder",
    "bundle_tiers",
    "check_writable",
    "copy_bundle",
]

FORMAT_VERSION = 1
# bundles shipped inside the package (manyheads/models/NAME/), loaded by name
BUILTIN_BUNDLES = ("content",)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def builtin_root() -> Path:
    """The folder holding the built-in bundles (``manyheads/models/``)."""
    return Path(__file__).parent / "models"


def bundle_folder(path: str | os.PathLike[str], tier: int | None = None) -> Path:
    """The folder :meth:`Bundle.load` reads for ``path`` and ``tier``.

    A name (a ``str``) in :data:`BUILTIN_BUNDLES` (``"content"``) is the
    built-in bundle of that name, always; a bundle folder of that name is
    written as a path (``"./content"``, or a :class:`~pathlib.Path`).
    ``tier``: a tier of a byte bundle other than its own is its sub-bundle
    ``tiers/<tier>/``.
    """
    folder = Path(path)
    name = os.fspath(path)
    if isinstance(path, str) and name in BUILTIN_BUNDLES:
        folder = builtin_root() / name
        if not has_bundle(folder):
            raise BundleError(
                f"the built-in bundle {name!r} is not installed ({folder} has no {BUNDLE_JSON}); "
                f"a bundle folder of that name is written as a path: ./{name}"
            )
    if tier is None:
        return folder
    if not isinstance(tier, int) or isinstance(tier, bool):
        raise ConfigError(f"tier must be an integer, got {tier!r}")
    spec = _trunk_spec(folder)
    if spec.get("type") != "byte":
        raise ConfigError(
            f"tier {tier}: only a byte trunk has tiers; the bundle at {folder} has a "
            f"{spec.get('type')!r} trunk"
        )
    if tier == spec.get("tier"):
        return folder
    sub = folder / TIERS_DIR / str(tier)
    if not has_bundle(sub):
        tiers = ", ".join(str(t) for t in bundle_tiers(folder))
        raise ConfigError(f"the bundle at {folder} has no tier {tier}; its tiers: {tiers}")
    return sub


def builtin_name(folder: str | os.PathLike[str]) -> str | None:
    """The name of the built-in bundle ``folder`` is (or lies inside), else None."""
    root = os.path.realpath(builtin_root())
    where = os.path.realpath(folder)
    if where != root and not where.startswith(root + os.sep):
        return None
    rel = os.path.relpath(where, root).split(os.sep)[0]
    return rel if rel != "." else ""


def check_writable(folder: str | os.PathLike[str]) -> None:
    """Refuse to write into a built-in bundle (it ships inside the package)."""
    name = builtin_name(folder)
    if name is not None:
        shown = name or "models"
        raise BundleError(
            f"the built-in bundle {shown!r} is read-only (it ships inside the package, at "
            f"{Path(folder)}); make a copy to change: manyheads copy {shown} DIR, then use -b DIR"
        )


def copy_bundle(source: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Copy the bundle ``source`` (a folder, or a built-in bundle's name) whole, with
    its tiers and kept data, to the new or empty folder ``out``: a bundle folder like
    any other, free to change. The copy appears complete or not at all."""
    import shutil

    src = bundle_folder(source)
    out = Path(out)
    check_writable(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BundleError(f"cannot copy to {out}: it exists and is not an empty folder")
    if os.path.realpath(out).startswith(os.path.realpath(src) + os.sep):
        raise BundleError(f"cannot copy {src} into itself ({out})")
    hidden = shutil.ignore_patterns(".*")  # the lock, other writers' temp files
    try:
        # no writer may change a folder while it is copied; a built-in one has none
        lock = folder_lock(src) if builtin_name(src) is None else contextlib.nullcontext()
        with lock, staged_dir(out) as work:
            shutil.copytree(src, work, dirs_exist_ok=True, ignore=hidden)
    except OSError as exc:
        raise BundleError(f"cannot copy {src} to {out}: {describe_os_error(exc)}") from None
    return out


def bundle_tiers(folder: str | os.PathLike[str]) -> list[int]:
    """The tiers a byte bundle folder can be loaded at: its own and those of its
    ``tiers/<dim>/`` sub-bundles (empty for other trunks)."""
    folder = Path(folder)
    spec = _trunk_spec(folder)
    if spec.get("type") != "byte":
        return []
    tiers = {int(spec["tier"])} if isinstance(spec.get("tier"), int) else set()
    if (folder / TIERS_DIR).is_dir():
        for sub in (folder / TIERS_DIR).iterdir():
            if sub.name.isdigit() and has_bundle(sub):
                tiers.add(int(sub.name))
    return sorted(tiers)


def _trunk_spec(folder: Path) -> dict[str, Any]:
    """The trunk spec a bundle folder names (read without loading the bundle)."""
    doc = read_document(folder)  # the weights file's header only, not its tensors
    if doc is None:
        raise BundleError(f"no bundle at {folder} (missing {BUNDLE_JSON})")
    trunk = doc.get("trunk")
    spec = trunk.get("spec") if isinstance(trunk, dict) else None
    if not isinstance(spec, dict):
        raise BundleError(f"{folder / BUNDLE_JSON}: 'trunk' needs name, fingerprint, dim and spec")
    return spec


def _blank_answer(kind: str) -> dict[str, Any]:
    """What a head answers for an empty text: no label (see ``Bundle.predict``)."""
    if kind == "multilabel":
        return {"labels": [], "scores": {}}
    return {"label": None, "score": None, "scores": {}}


def check_head_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise DataError(
            f"invalid head name {name!r}: use 1-64 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit"
        )
    return name


def data_hash(texts: Sequence[str], labels: Sequence[Any]) -> str:
    """sha256 of the training texts and labels (order-sensitive)."""
    h = hashlib.sha256()
    for text, label in zip(texts, labels, strict=True):
        h.update(text.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
        h.update(json.dumps(label, sort_keys=True, default=str).encode())
        h.update(b"\x01")
    return h.hexdigest()


@dataclass(frozen=True)
class HeadSummary:
    """What :meth:`Bundle.fit_head` reports."""

    name: str
    kind: str
    n_classes: int
    n_train: int
    n_val: int
    metrics: dict[str, Any]
    seconds: float
    embed_seconds: float


@dataclass(frozen=True)
class FinetuneSummary:
    """What :meth:`Bundle.finetune` reports: the fine-tuning run, each refitted head,
    and the heads dropped because the bundle had no training data for them."""

    report: Any
    heads: list[HeadSummary]
    dropped: list[str]


Record: TypeAlias = "tuple[dict[str, Any], dict[str, np.ndarray]]"


class _LazyHeads(Mapping[str, Any]):
    """``{name: head}`` whose estimators are rebuilt from their records on first access.

    Answering needs only the records (numpy); the scikit-learn estimators are
    built when something asks for them (evaluation, refits, ``bundle.heads[n]``).
    """

    def __init__(self, records: Mapping[str, Record], built: Mapping[str, Any]) -> None:
        self._records = records
        self._built = {n: h for n, h in built.items() if n in records}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Any:
        head = self._built.get(name)
        if head is None:
            record, tensors = self._records[name]
            with self._lock:
                head = self._built.get(name)
                if head is None:
                    head = self._built[name] = any_head_from_record(record, tensors)
        return head

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def __repr__(self) -> str:
        return f"<heads {list(self._records)}>"


@dataclass(frozen=True)
class _State:
    """An immutable snapshot of the head set: swapped whole, never edited in place."""

    records: Mapping[str, Record] = field(default_factory=dict)
    info: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    heads: _LazyHeads = field(default_factory=lambda: _LazyHeads({}, {}))
    fused: FusedHeads | None = None

    @staticmethod
    def build(records: dict[str, Record], info: dict[str, dict[str, Any]]) -> _State:
        records = dict(records)
        return _State(
            records=MappingProxyType(records),
            info=MappingProxyType(dict(info)),
            heads=_LazyHeads(records, {}),
            fused=FusedHeads.from_records(records) if records else None,
        )

    def replace(
        self,
        records: dict[str, Record],
        info: dict[str, dict[str, Any]],
        built: Mapping[str, Any] = MappingProxyType({}),
    ) -> _State:
        """The next snapshot: heads whose record object is unchanged keep their checked
        spec and their built estimator; ``built`` adds estimators of new heads."""
        records = dict(records)
        same = {n for n, r in records.items() if self.records.get(n) is r}
        estimators = {n: h for n, h in self.heads._built.items() if n in same}
        known = {n: self.fused.specs[n] for n in same} if self.fused is not None else None
        return _State(
            records=MappingProxyType(records),
            info=MappingProxyType(dict(info)),
            heads=_LazyHeads(records, {**estimators, **built}),
            fused=FusedHeads.from_records(records, known) if records else None,
        )


_DEFAULT = "default"
Features: TypeAlias = "np.ndarray | sp.csr_matrix"


HEAD_TYPES = ("linear", "mlp", "auto")


_SCALAR = (str, int, float, bool, np.integer, np.floating, np.bool_)


def check_labels(name: str, kind: str, labels: Sequence[Any]) -> None:
    """Multiclass / binary labels are single values; multilabel labels are lists of them;
    a label is valid Unicode text, a finite number or a boolean."""
    for i, label in enumerate(labels):
        for value in label if isinstance(label, list | tuple | set | frozenset) else [label]:
            # text and numbers are judged as every label is; other types get the
            # kind-specific messages below
            if isinstance(value, np.floating):
                value = float(value)
            problem = label_problem(value) if isinstance(value, str | float) else None
            if problem is not None:
                raise DataError(f"head {name!r}: label #{i} {problem}")
        if kind == "multilabel":
            ok = isinstance(label, str) or (
                isinstance(label, (list, tuple, set, frozenset))
                and all(isinstance(v, _SCALAR) for v in label)
            )
            if not ok:
                raise DataError(
                    f"head {name!r}: label #{i} is {label!r}; a multilabel head takes a list "
                    "of labels per text"
                )
        elif not isinstance(label, _SCALAR):
            raise DataError(
                f"head {name!r}: label #{i} is {label!r}; a {kind} head takes one label "
                "(a string or number) per text"
                + ("; use kind 'multilabel' for lists" if isinstance(label, list) else "")
            )
    _check_one_spelling(name, labels)


def _check_one_spelling(name: str, labels: Sequence[Any]) -> None:
    """Refuse a string and a number that read the same (``1`` and ``"1"``): they would
    be two classes that every answer prints alike."""
    seen: dict[str, tuple[Any, int]] = {}
    for i, label in enumerate(labels):
        for value in label if isinstance(label, list | tuple | set | frozenset) else [label]:
            first, at = seen.setdefault(str(value), (value, i))
            if isinstance(first, str) != isinstance(value, str):
                raise DataError(
                    f"head {name!r}: label #{at} is {first!r} and label #{i} is {value!r}: "
                    "a string and a number that read the same would be two classes; "
                    "give every label as the same type"
                )


def _check_max_chars(max_chars: Any) -> int:
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < 1:
        raise ConfigError(f"max_chars must be a positive integer, got {max_chars!r}")
    return max_chars


def split_text(text: str, max_chars: int) -> list[str]:
    """``text`` in pieces of at most ``max_chars`` characters, cut at the last whitespace
    of a piece's second half where there is one (never an empty piece)."""
    _check_max_chars(max_chars)
    if len(text) <= max_chars:
        return [text]
    pieces = []
    start = 0
    while len(text) - start > max_chars:
        end = start + max_chars
        cut = max(text.rfind(" ", start + max_chars // 2, end), text.rfind("\n", start, end))
        if cut <= start + max_chars // 2:
            cut = end
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def _dense(X: Any) -> np.ndarray:
    return np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float32)


def _new_head(
    head_type: str, kind: str, *, C: float | str, class_weight: Any, seed: int, thresholds: str
) -> AnyHead:
    if head_type == "mlp":
        from .heads.mlp import MLPHead

        return MLPHead(
            kind=kind, class_weight=class_weight, random_state=seed, thresholds=thresholds
        )
    from .heads.linear import LinearHead

    return LinearHead(kind=kind, C=C, class_weight=class_weight, thresholds=thresholds)


def _split(
    kind: str, labels: list[Any], groups: Sequence[Any] | None, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Train / held-out row indices: grouped when ``groups`` are given, else stratified
    by label (multilabel: not stratified)."""
    return split_indices(
        len(labels),
        stratify=None if kind == "multilabel" else [str(v) for v in labels],
        groups=groups,
        val_fraction=fraction,
        seed=seed,
    )


def _vstack(a: Features, b: Features) -> Features:
    if sp.issparse(a) or sp.issparse(b):
        return sp.vstack([sp.csr_matrix(a), sp.csr_matrix(b)], format="csr")
    return np.concatenate([a, b])


class Bundle:
    """One trunk and many heads; every answer from one trunk pass.

    Parameters
    ----------
    trunk : str, path, spec dict or Trunk
        ``"minilm"`` (default), ``"hashing"``, a local model folder, or a trunk object.
    cache : ``"default"``, None, path or EmbeddingCache
        Embedding cache used when training and evaluating. ``None`` disables it.
    limits : HeadLimits
        Caps on the heads this bundle takes in: labels per head, characters per
        label, heads (default ``HeadLimits()``: 1,000 / 200 / 256).
    """

    def __init__(
        self,
        trunk: str | Path | dict[str, Any] | Trunk = "minilm",
        *,
        cache: str | Path | EmbeddingCache | None = _DEFAULT,
        limits: HeadLimits | None = None,
    ) -> None:
        self.limits = limits or HeadLimits()
        # head changes since the generation this bundle was loaded from or last saved:
        # name -> True (added or replaced) / False (removed); a save merges them
        self._changes: dict[str, bool] = {}
        self._trunk: Trunk | None = load_trunk(trunk)
        self._trunk_state: dict[str, np.ndarray] = {}
        self._data: dict[str, tuple[list[str], list[Any], list[Any] | None]] = {}
        self._trunk_ref: dict[str, Any] = self._reference(self._trunk)
        self._cache_arg = cache
        self._cache: EmbeddingCache | None = None
        self._state = _State()
        self._lock = threading.RLock()
        self.path: Path | None = None
        self.generation: str | None = None  # of the bundle.json last loaded or saved
        # (path relative to the folder, resolved file): the file holding the trunk's
        # weights when it is another bundle's (a tier's sub-bundle uses its parent's)
        self._trunk_weights: tuple[str, Path] | None = None

    def copy(self) -> Bundle:
        """A bundle sharing this one's trunk, cache and heads, whose head set and kept
        data change independently (a service changes a copy, saves it, then swaps)."""
        other = copy.copy(self)
        other._changes = dict(self._changes)
        other._data = dict(self._data)
        other._trunk_ref = dict(self._trunk_ref)
        other._trunk_state = dict(self._trunk_state)
        other._lock = threading.RLock()
        return other

    @property
    def trunk_reference(self) -> dict[str, Any]:
        """The trunk as ``bundle.json`` names it: name, fingerprint, dim, spec."""
        return copy.deepcopy(self._trunk_ref)

    # -- trunk and cache ---------------------------------------------------

    @staticmethod
    def _reference(trunk: Trunk) -> dict[str, Any]:
        """What bundle.json says of the trunk (fingerprint ``None`` until it is fitted)."""
        pending = bool(getattr(trunk, "needs_fit", False))
        return {
            "name": trunk.name,
            "fingerprint": None if pending else trunk.fingerprint,
            "dim": int(trunk.dim),
            "spec": trunk.spec(),
        }

    @property
    def trunk_needs_fit(self) -> bool:
        """True for a new bundle whose trunk has parts fitted on training texts (idf)."""
        return self._trunk_ref["fingerprint"] is None

    def fit_trunk(self, texts: Sequence[str]) -> None:
        """Fit the trunk's fitted parts on ``texts``, once; the trunk is frozen afterwards.

        ``fit_head`` calls this with its training texts when needed, so the
        first head trained into a new bundle fits the trunk.
        """
        with self._lock:
            if not self.trunk_needs_fit:
                raise BundleError(
                    f"the trunk {self.trunk_name!r} of this bundle is already fitted and frozen; "
                    "heads added later reuse it"
                )
            trunk = self.trunk
            trunk.fit(check_texts(texts))  # type: ignore[attr-defined]
            self._trunk_state = dict(trunk.state())  # type: ignore[attr-defined]
            self._trunk_ref = self._reference(trunk)

    @property
    def trunk(self) -> Trunk:
        """The trunk, built on first use (a loaded bundle defers it) and checked."""
        with self._lock:
            if self._trunk is None:
                trunk = load_trunk(self._trunk_ref["spec"], state=self._trunk_state, base=self.path)
                if trunk.fingerprint != self._trunk_ref["fingerprint"]:
                    raise FingerprintMismatchError(
                        f"the bundle was trained on trunk {self._trunk_ref['name']!r} with "
                        f"fingerprint {self._trunk_ref['fingerprint']}, but the trunk found here "
                        f"has fingerprint {trunk.fingerprint}; its weights or settings differ"
                    )
                self._trunk = trunk
            return self._trunk

    @property
    def trunk_fingerprint(self) -> str:
        return str(self._trunk_ref["fingerprint"])

    @property
    def trunk_name(self) -> str:
        return str(self._trunk_ref["name"])

    @property
    def dim(self) -> int:
        return int(self._trunk_ref["dim"])

    @property
    def tier(self) -> int | None:
        """The tier (nested embedding size) a byte trunk serves; ``None`` for other trunks."""
        spec = self._trunk_ref["spec"]
        return int(spec["tier"]) if spec.get("type") == "byte" and "tier" in spec else None

    @property
    def tiers(self) -> list[int]:
        """The tiers this saved byte bundle can be loaded at (``Bundle.load(path,
        tier=...)``): its own and those of its ``tiers/`` sub-bundles."""
        if self.path is None or not (self.path / BUNDLE_JSON).is_file():
            return [] if self.tier is None else [self.tier]
        return bundle_tiers(self.path)

    def tier_bundles(self) -> dict[int, Bundle]:
        """``{tier: bundle}`` of this saved byte bundle's other tiers (``tiers/<dim>/``),
        loaded with this bundle's cache."""
        if self.path is None:
            return {}
        return {
            t: Bundle.load(self.path / TIERS_DIR / str(t), cache=self._cache_arg)
            for t in self.tiers
            if t != self.tier
        }

    def save_tiers(self, tiers: Mapping[int, Bundle]) -> dict[int, Path]:
        """Save bundles of this byte bundle's trunk at other tiers as its sub-bundles
        (``tiers/<dim>/`` of the folder this bundle was saved to); they use this
        bundle's ONNX graph file and trunk weights (its ``heads.safetensors``)
        rather than copies of them. Save this bundle first."""
        from .trunks.byte import ByteTrunk

        spec = self._trunk_ref["spec"]
        if self.path is None or spec.get("type") != "byte" or "graph" not in spec:
            raise BundleError("save_tiers needs a byte bundle that was saved first")
        out = {}
        for tier, sub in tiers.items():
            trunk = sub.trunk
            if (
                not isinstance(trunk, ByteTrunk)
                or trunk.tier != tier
                or tier == self.tier
                or trunk.with_tier(int(spec["tier"])).fingerprint != self.trunk_fingerprint
            ):
                raise BundleError(
                    f"tier {tier}: give a bundle on this bundle's byte trunk at tier {tier}"
                )
            folder = self.path / TIERS_DIR / str(tier)
            # the same weights: the parent's graph and weights files, named from tiers/<dim>/
            trunk.graph, trunk.graph_sha256 = f"../../{spec['graph']}", spec["graph_sha256"]
            trunk.folder = folder
            sub._trunk_weights = (f"../../{HEADS_FILE}", (self.path / HEADS_FILE).resolve())
            out[tier] = sub.save(folder)
        return out

    @property
    def cache(self) -> EmbeddingCache | None:
        if self._cache is None and self._cache_arg is not None:
            arg = self._cache_arg
            if isinstance(arg, EmbeddingCache):
                self._cache = arg
            else:
                self._cache = EmbeddingCache(None if arg == _DEFAULT else Path(arg))
        return self._cache

    def embed(
        self, texts: Sequence[str], *, use_cache: bool = True, progress: bool = False
    ) -> Features:
        """Trunk vectors of ``texts`` (a CSR matrix when a trunk part is sparse).

        With the cache, only texts unseen by the trunk (or, for a composite
        trunk, by each of its expensive parts) reach it.
        """
        texts = check_texts(texts)
        if self.trunk_needs_fit:
            raise BundleError(
                f"the trunk {self.trunk_name!r} must be fitted on training texts first "
                "(Bundle.fit_trunk, or train a head)"
            )
        trunk = self.trunk
        cache = self.cache if use_cache else None
        if isinstance(trunk, CompositeTrunk):
            return trunk.combine([self._embed_part(p, texts, cache, progress) for p in trunk.parts])
        return self._embed_part(trunk, texts, cache, progress)

    @staticmethod
    def _embed_part(
        trunk: Any, texts: list[str], cache: EmbeddingCache | None, progress: bool
    ) -> Features:
        if cache is None or not getattr(trunk, "cacheable", True):
            if not texts:
                return np.zeros((0, trunk.dim), dtype=np.float32)
            if hasattr(trunk, "encode_sparse"):
                return trunk.encode_sparse(texts)
            return trunk.encode(texts, progress=progress)
        fp, dim = getattr(trunk, "cache_key", trunk.fingerprint), int(trunk.dim)
        found = cache.get(fp, texts, dim)
        todo = list(dict.fromkeys(t for t, v in zip(texts, found, strict=True) if v is None))
        fresh: dict[str, np.ndarray] = {}
        if todo:
            vecs = trunk.encode(todo, progress=progress)
            cache.put(fp, todo, vecs)
            # round-trip through the storage type so cached and fresh runs agree exactly
            vecs = vecs.astype(np.float16 if cache.dtype == "float16" else np.float32)
            fresh = dict(zip(todo, vecs.astype(np.float32), strict=True))
        out = np.empty((len(texts), dim), dtype=np.float32)
        for i, (t, v) in enumerate(zip(texts, found, strict=True)):
            out[i] = v if v is not None else fresh[t]
        return out

    # -- heads -------------------------------------------------------------

    @property
    def heads(self) -> Mapping[str, AnyHead]:
        """``{name: head}`` (read-only view of the current head set)."""
        return self._state.heads

    @property
    def head_info(self) -> Mapping[str, dict[str, Any]]:
        """Per head: kind, field, validation metrics, training-data hash, created time, ..."""
        return self._state.info

    def labels(self, name: str) -> list[Any]:
        """The labels (classes) head ``name`` answers with, in its output order."""
        state = self._state
        if state.fused is None or name not in state.fused.specs:
            raise UnknownHeadError(
                f"unknown head {name!r}; the bundle has: {', '.join(state.records) or '-'}"
            )
        return list(state.fused.specs[name].labels)

    def resolve_heads(self, heads: Sequence[str] | str | None) -> list[str]:
        state = self._state
        if not state.heads:
            raise BundleError("the bundle has no heads yet; train one first")
        if heads is None:
            return list(state.heads)
        if isinstance(heads, str):
            heads = [h for h in heads.split(",") if h]
        names = list(dict.fromkeys(heads))
        unknown = [h for h in names if h not in state.heads]
        if unknown:
            raise UnknownHeadError(
                f"unknown head {unknown[0]!r}; the bundle has: {', '.join(state.heads)}"
            )
        if not names:
            raise DataError("no head names given")
        return names

    def fit_head(
        self,
        name: str,
        texts: Sequence[str],
        labels: Sequence[Any],
        kind: str = "multiclass",
        *,
        groups: Sequence[Any] | None = None,
        val_texts: Sequence[str] | None = None,
        val_labels: Sequence[Any] | None = None,
        val_fraction: float = 0.2,
        refit: bool | None = None,
        field: str | None = None,
        C: float | str = 1.0,
        class_weight: str | dict[Any, float] | None = None,
        head: str = "linear",
        thresholds: str = "f1",
        keep_data: bool = True,
        seed: int = 0,
        progress: bool = False,
    ) -> HeadSummary:
        """Train (or replace) head ``name`` on ``texts`` / ``labels``.

        ``head``: ``"linear"`` (default; fused into the bundle's one matrix
        product), ``"mlp"`` (one hidden layer, dropout, early stopping on the
        validation split; needs torch to train, not to predict), or ``"auto"``
        (both, keeping the one with the better validation accuracy).
        ``thresholds``: what binary / multilabel thresholds maximise on the
        validation split, ``"f1"`` (default) or ``"accuracy"``.

        With ``keep_data`` (default) the training texts, labels and groups are
        saved in the bundle (``data/HASH.jsonl.gz``), so every head can be
        refitted when the trunk changes (``manyheads finetune``).

        The data is split into train and validation (grouped when ``groups``
        are given, else stratified), unless ``val_texts`` / ``val_labels`` are
        passed. The head is fitted on the train part, its temperature (and
        binary / multilabel thresholds) on the validation part, validation
        metrics are recorded. With ``refit`` the weights are then fitted again
        on all rows; a multiclass head's temperature is then fitted again on
        5-fold out-of-fold logits at the same ``C`` (folds by ``groups``), since
        the model fitted on all rows is more confident than the one the
        validation split saw (``metrics["ece_cv"]`` is the out-of-fold ECE).
        ``refit=None`` (default) refits
        multiclass heads only: their argmax decisions gain from the extra
        rows, while binary / multilabel decisions rest on thresholds tuned for
        the train-part model's confidence, which a refit shifts (measured in
        bench/RESULTS.md).
        """
        import time

        from .heads.linear import LinearHead, check_kind

        name = check_head_name(name)
        kind = check_kind(kind)
        texts = check_texts(texts)
        labels = list(labels)
        if len(texts) != len(labels):
            raise DataError(f"{len(texts)} texts but {len(labels)} labels")
        if not texts:
            raise DataError(f"head {name!r}: no training texts")
        for i, t in enumerate(texts):
            if not t.strip():
                raise DataError(f"head {name!r}: text #{i} is empty")
        check_labels(name, kind, labels)
        if groups is not None:
            groups = list(groups)
            if len(groups) != len(texts):
                raise DataError(f"head {name!r}: {len(texts)} texts but {len(groups)} groups")
            for i, g in enumerate(groups):
                if isinstance(g, bool) or not isinstance(g, str | int | np.integer):
                    raise DataError(
                        f"head {name!r}: group #{i} is {str(g)[:40]}; a group is a string or "
                        "an integer"
                    )
                if isinstance(g, str) and unicode_problem(g) is not None:
                    raise DataError(f"head {name!r}: group #{i} {unicode_problem(g)}")
        if head not in HEAD_TYPES:
            raise ConfigError(f"head type must be one of {', '.join(HEAD_TYPES)}; got {head!r}")
        # caps before any trunk call: a mistake costs no pass over the texts
        distinct: set[Any] = (
            {v for labs in labels for v in ([labs] if isinstance(labs, str) else labs)}
            if kind == "multilabel"
            else set(labels)
        )
        self.limits.check_labels(list(distinct), f"head {name!r}")
        if name not in self._state.records:
            self.limits.check_head_count(len(self._state.records) + 1, f"head {name!r}")
        if self.trunk_needs_fit:
            self.fit_trunk(texts)
        t0 = time.perf_counter()
        X_all = self.embed(
            texts + (list(val_texts) if val_texts is not None else []), progress=progress
        )
        embed_seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        if val_texts is not None:
            if val_labels is None or len(val_labels) != len(val_texts):
                raise DataError("val_texts and val_labels must be given together, same length")
            X, X_val = X_all[: len(texts)], X_all[len(texts) :]
            y, y_val = labels, list(val_labels)
            train_idx = np.arange(len(texts))
        else:
            X_full = X_all
            if val_fraction > 0:
                train_idx, val_idx = _split(kind, labels, groups, val_fraction, seed)
            else:
                train_idx, val_idx = np.arange(len(texts)), np.arange(0)
            X, X_val = X_full[train_idx], X_full[val_idx]
            y = [labels[i] for i in train_idx]
            y_val = [labels[i] for i in val_idx]
        try:
            if head != "linear" and sp.issparse(X):  # MLP heads take dense input
                X, X_val, X_all = _dense(X), _dense(X_val), _dense(X_all)
            candidates = ["linear", "mlp"] if head == "auto" else [head]
            fitted: list[tuple[Any, ...]] = []
            for head_type in candidates:
                model = _new_head(
                    head_type,
                    kind,
                    C=C,
                    class_weight=class_weight,
                    seed=seed,
                    thresholds=thresholds,
                )
                model.fit(X, y, X_val=X_val if y_val else None, y_val=y_val or None)
                Xv, yv = self._known_only(model, X_val, y_val) if y_val else (X_val, y_val)
                found = self._metrics(model, Xv, yv) if len(yv) else {"n": 0}
                fitted.append((found.get("accuracy", 0.0), -len(fitted), model, found, Xv, yv))
            # best validation accuracy; ties go to the earlier (linear) candidate
            _, _, model, best_metrics, X_val, y_val = max(fitted, key=lambda f: (f[0], f[1]))
            metrics = dict(best_metrics)
            if head == "auto":
                metrics["head_choice"] = {
                    type_: round(float(f[0]), 6)
                    for type_, f in zip(candidates, fitted, strict=True)
                }
            if len(y_val) and model.temperature_ != 1.0:
                temperature, model.temperature_ = model.temperature_, 1.0
                metrics["ece_uncalibrated"] = self._metrics(model, X_val, y_val)["ece"]
                model.temperature_ = temperature
            if refit is None:  # default: multiclass heads only (see the docstring)
                refit = kind == "multiclass"
            if refit and len(y_val) and isinstance(model, LinearHead):
                X_fit = _vstack(X, X_val) if val_texts is not None else X_all
                y_fit = list(y) + list(y_val) if val_texts is not None else labels
                self._refit_keeping_calibration(model, X_fit, y_fit)
                if kind == "multiclass":
                    fit_groups = None if groups is None else [f"g{g!r}" for g in groups]
                    if fit_groups is not None and val_texts is not None:
                        fit_groups += [f"v{i}" for i in range(len(y_val))]
                    cv = model.crossfit_temperature(X_fit, y_fit, groups=fit_groups, seed=seed)
                    metrics["temperature"] = cv["temperature"]
                    if "ece_cv" in cv:
                        metrics["ece_cv"] = cv["ece_cv"]
        except DataError as exc:
            raise DataError(f"head {name!r}: {exc}") from exc
        seconds = time.perf_counter() - t1
        # the kept data is every row given, validation rows included
        kept_texts, kept_labels, kept_groups = texts, labels, groups
        if val_texts is not None:
            kept_texts = texts + list(val_texts)
            kept_labels = labels + list(val_labels or [])
            if groups is not None:
                kept_groups = list(groups) + [f"validation-{i}" for i in range(len(val_texts))]
        info = {
            "kind": kind,
            "field": field or name,
            "trunk_fingerprint": self.trunk_fingerprint,
            "metrics": metrics,
            "n_train": len(train_idx),
            "n_val": int(metrics.get("n", 0)),
            "data_hash": data_hash(kept_texts, kept_labels),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "head_type": "mlp" if not isinstance(model, LinearHead) else "linear",
        }
        if keep_data:
            rel = f"{DATA_DIR}/{str(info['data_hash'])[:24]}.jsonl.gz"
            info["data"] = rel
            self._data[rel] = (
                kept_texts,
                kept_labels,
                None if kept_groups is None else list(kept_groups),
            )
        self.add_head(name, model, info=info)
        return HeadSummary(
            name=name,
            kind=kind,
            n_classes=len(model.classes_),
            n_train=len(train_idx),
            n_val=int(metrics.get("n", 0)),
            metrics=metrics,
            seconds=seconds,
            embed_seconds=embed_seconds,
        )

    @staticmethod
    def _refit_keeping_calibration(head: LinearHead, X: np.ndarray, y: list[Any]) -> None:
        """Fit again on all rows (warm start), keeping temperature and per-label thresholds."""
        temperature = head.temperature_
        old: dict[Any, float] = {}
        if head.kind == "multilabel":
            old = dict(zip(head.classes_.tolist(), head.thresholds_.tolist(), strict=True))
        binary_threshold = float(head.thresholds_[0])
        head.set_params(warm_start=True)
        try:
            head.fit(X, y)
        finally:
            head.set_params(warm_start=False)
        head.temperature_ = temperature
        if head.kind == "multilabel":
            head.thresholds_ = np.array(
                [old.get(c, 0.5) for c in head.classes_.tolist()], dtype=np.float32
            )
        elif head.kind == "binary":
            head.thresholds_ = np.array([binary_threshold], dtype=np.float32)

    @staticmethod
    def _known_only(
        head: AnyHead, X_val: Features, y_val: list[Any]
    ) -> tuple[np.ndarray, list[Any]]:
        """Drop validation rows whose class the train split never saw (multiclass/binary)."""
        if head.kind == "multilabel":
            known = set(head.classes_.tolist())
            return X_val, [[lab for lab in labs if lab in known] for labs in y_val]
        known = set(head.classes_.tolist())
        keep = [i for i, v in enumerate(y_val) if v in known]
        return X_val[keep], [y_val[i] for i in keep]

    @staticmethod
    def _metrics(head: AnyHead, X: np.ndarray, y: Sequence[Any]) -> dict[str, Any]:
        from .evaluate import head_metrics

        proba = head.predict_proba(X)
        target = head._encode_targets(y)
        if head.kind == "multilabel":
            pred = (proba >= head.thresholds_).astype(int)
        else:
            pred_labels = head.predict_from_proba(proba)
            index = {c: i for i, c in enumerate(head.classes_.tolist())}
            pred = np.array([index[v] for v in pred_labels.tolist()])
        return head_metrics(head.kind, target, pred, proba)

    def add_head(self, name: str, head: AnyHead, *, info: dict[str, Any] | None = None) -> None:
        """Add or replace one head. ``info['trunk_fingerprint']`` must match the trunk."""
        name = check_head_name(name)
        if not hasattr(head, "n_features_in_") or not hasattr(head, "temperature_"):
            raise DataError(f"head {name!r} must be a fitted LinearHead or MLPHead")
        info = dict(info or {})
        fp = info.setdefault("trunk_fingerprint", self.trunk_fingerprint)
        if fp != self.trunk_fingerprint:
            raise FingerprintMismatchError(
                f"head {name!r} was trained on trunk fingerprint {fp}, but this bundle's "
                f"trunk {self.trunk_name!r} has fingerprint {self.trunk_fingerprint}"
            )
        if head.n_features_in_ != self.dim:
            raise FingerprintMismatchError(
                f"head {name!r} expects {head.n_features_in_}-d embeddings, "
                f"the trunk gives {self.dim}-d"
            )
        info.setdefault("kind", head.kind)
        info.setdefault("field", name)
        info.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
        record = any_head_to_record(head)
        where = f"head {name!r}"
        check_label_values(record[0].get("labels"), where)
        self.limits.check_labels(record[0]["labels"], where)
        with self._lock:
            records = dict(self._state.records)
            infos = dict(self._state.info)
            records[name] = record
            infos[name] = info
            self.limits.check_head_count(len(records), where)
            self._state = self._state.replace(records, infos, {name: head})
            self._changes[name] = True

    def remove_head(self, name: str) -> None:
        with self._lock:
            if name not in self._state.heads:
                raise UnknownHeadError(
                    f"unknown head {name!r}; the bundle has: {', '.join(self._state.heads) or '-'}"
                )
            records = {k: v for k, v in self._state.records.items() if k != name}
            infos = {k: v for k, v in self._state.info.items() if k != name}
            self._state = self._state.replace(records, infos)
            self._changes[name] = False

    def export_head(self, name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """One head as (JSON record, tensors) — the form the bundle stores it in."""
        state = self._state
        if name not in state.heads:
            raise UnknownHeadError(
                f"unknown head {name!r}; the bundle has: {', '.join(state.heads)}"
            )
        record, tensors = state.records[name]
        record = dict(record)
        record.update({k: v for k, v in state.info[name].items() if k not in record})
        return record, tensors

    def import_head(
        self, name: str, record: dict[str, Any], tensors: dict[str, np.ndarray]
    ) -> None:
        """Install a head from its record and tensors; refuses another trunk's head."""
        name = check_head_name(name)
        if not isinstance(record, dict):
            raise DataError(f"head {name!r}: the record must be an object")
        if "trunk_fingerprint" not in record:
            raise DataError(f"head {name!r} record lacks 'trunk_fingerprint'")
        try:
            from .heads.fused import spec_from_record

            spec_from_record(record, tensors)
            head = any_head_from_record(record, tensors)
        except DataError as exc:
            raise DataError(f"head {name!r}: {exc}") from None
        # a head from elsewhere brings no kept training data into this bundle
        info = {
            k: v
            for k, v in record.items()
            if k not in ("type", "labels", "temperature", "thresholds", "params", "data")
        }
        info["kind"] = head.kind
        if not isinstance(info.get("field", name), str):
            raise DataError(f"head {name!r}: 'field' must be a string")
        self.add_head(name, head, info=info)

    # -- prediction --------------------------------------------------------

    def predict(
        self,
        texts: Sequence[str],
        heads: Sequence[str] | str | None = None,
        *,
        use_cache: bool = False,
        max_chars: int | None = None,
    ) -> list[dict[str, Any]]:
        """Answers of every head (or of ``heads``) for each text, from one trunk pass.

        Multiclass / binary heads answer ``{"label", "score", "scores"}``;
        multilabel heads answer ``{"labels", "scores"}`` (labels whose
        probability reaches the head's tuned threshold).

        An empty or whitespace-only text has nothing to classify: no head
        computes it, and every head answers it with no label
        (``{"label": None, "score": None, "scores": {}}``; multilabel
        ``{"labels": [], "scores": {}}``), so no guard head raises an alarm
        on it.

        ``max_chars``: a text longer than this is read as pieces of at most
        ``max_chars`` characters (cut at whitespace where there is some), all
        in the same trunk pass; its probabilities are the pieces' mean,
        weighted by length.
        """
        state = self._state  # one snapshot for the whole call
        names = self.resolve_heads(heads)
        texts = check_texts(texts)
        if not texts:
            return []
        blank = [not t.strip() for t in texts]
        if any(blank):
            filled = [t for t, b in zip(texts, blank, strict=True) if not b]
            answered = iter(
                self._predict_state(state, filled, names, use_cache, max_chars) if filled else []
            )
            kinds = {n: state.heads[n].kind for n in names}
            return [
                {n: _blank_answer(kinds[n]) for n in names} if b else next(answered) for b in blank
            ]
        return self._predict_state(state, texts, names, use_cache, max_chars)

    def _predict_state(
        self,
        state: _State,
        texts: list[str],
        names: list[str],
        use_cache: bool,
        max_chars: int | None,
    ) -> list[dict[str, Any]]:
        assert state.fused is not None
        if max_chars is None or all(len(t) <= _check_max_chars(max_chars) for t in texts):
            return state.fused.answers(self._probabilities(state, texts, names, use_cache), names)
        pieces: list[str] = []
        owner: list[int] = []
        for i, text in enumerate(texts):
            parts = split_text(text, max_chars)
            pieces.extend(parts)
            owner.extend([i] * len(parts))
        weight = np.array([len(p) for p in pieces], dtype=np.float64)
        weight /= np.bincount(owner, weights=weight, minlength=len(texts))[owner]
        probs = {}
        for name, p in self._probabilities(state, pieces, names, use_cache).items():
            mean = np.zeros((len(texts), p.shape[1]), dtype=np.float64)
            np.add.at(mean, owner, p * weight[:, None])
            probs[name] = mean.astype(np.float32)
        return state.fused.answers(probs, names)

    def predict_proba(
        self, texts: Sequence[str], heads: Sequence[str] | str | None = None
    ) -> dict[str, np.ndarray]:
        """``{head: probabilities}`` (texts x outputs; binary heads: ``[1 - p, p]``)."""
        state = self._state
        names = self.resolve_heads(heads)
        return self._probabilities(state, check_texts(texts), names, False)

    def _probabilities(
        self, state: _State, texts: list[str], names: list[str], use_cache: bool
    ) -> dict[str, np.ndarray]:
        """Every requested head's probabilities from one trunk pass.

        An exported bundle's graph computes the heads it holds; a head added
        since (not yet written into the graph) is applied to the graph's
        embedding here.
        """
        assert state.fused is not None
        trunk = self.trunk
        if use_cache or not hasattr(trunk, "graph_heads"):
            return state.fused.probabilities(self.embed(texts, use_cache=use_cache), names)
        graph = trunk.graph()  # type: ignore[attr-defined]  # one snapshot for this call
        inside = [n for n in names if graph.heads.get(n) == state.fused.specs[n].digest]
        out = trunk.run(texts, inside, graph=graph)  # type: ignore[attr-defined]
        probs = {n: out[n] for n in inside}
        rest = [n for n in names if n not in probs]
        if rest:
            probs.update(state.fused.probabilities(out["embedding"], rest))
        return probs

    def evaluate(
        self, texts: Sequence[str], labels: Mapping[str, Sequence[Any]]
    ) -> dict[str, dict[str, Any]]:
        """Metrics of each head in ``labels`` on these texts (one trunk pass for all)."""
        state = self._state
        names = self.resolve_heads(list(labels))
        X = self.embed(texts)
        out = {}
        for name in names:
            head = state.heads[name]
            y = list(labels[name])
            if len(y) != X.shape[0]:
                raise DataError(f"head {name!r}: {X.shape[0]} texts but {len(y)} labels")
            if head.kind == "multilabel":
                known = set(head.classes_.tolist())
                unseen = sorted({lab for labs in y for lab in labs} - known)
                y = [[lab for lab in labs if lab in known] for labs in y]
                metrics = self._metrics(head, X, y)
            else:
                known = set(head.classes_.tolist())
                unseen = sorted({v for v in y if v not in known}, key=str)
                metrics = self._metrics_with_unseen(head, X, y)
            metrics = {"kind": head.kind, **metrics}
            if unseen:
                metrics["unseen_labels"] = [str(u) for u in unseen[:20]]
            out[name] = metrics
        return out

    @staticmethod
    def _metrics_with_unseen(head: AnyHead, X: np.ndarray, y: list[Any]) -> dict[str, Any]:
        """Multiclass/binary metrics where labels unknown to the head count as errors."""
        from .evaluate import head_metrics

        proba = head.predict_proba(X)
        index = {c: i for i, c in enumerate(head.classes_.tolist())}
        target = np.array([index.get(v, -1) for v in y])
        pred_labels = head.predict_from_proba(proba).tolist()
        pred = np.array([index[v] for v in pred_labels])
        return head_metrics(head.kind, target, pred, proba)

    # -- persistence -------------------------------------------------------

    def to_dict(self, generation: str) -> dict[str, Any]:
        state = self._state
        heads = {}
        for name in state.heads:
            record, _ = self.export_head(name)
            heads[name] = record
        return {
            "format": "manyheads-bundle",
            "format_version": FORMAT_VERSION,
            "manyheads_version": __version__,
            "generation": generation,
            "trunk": dict(self._trunk_ref),
            "heads": heads,
        }

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write the bundle folder atomically, holding its writers' lock; returns its path.

        If the folder holds a bundle saved by another writer since this one was
        loaded from it (or it holds a bundle and this one comes from elsewhere),
        this bundle's head changes are merged onto it: heads added or replaced
        here replace theirs, heads removed here go, every other head on disk
        stays, and this bundle then holds the merged head set. A bundle on
        another trunk cannot be merged: :class:`BundleConflictError`, and
        nothing is written. ``overwrite=True`` replaces whatever the folder
        holds with this bundle instead.
        """
        folder = Path(path)
        check_writable(folder)
        if folder.exists() and not folder.is_dir():
            raise BundleError(f"cannot save the bundle to {folder}: it is a file, not a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with self._lock, folder_lock(folder):
                on_disk = None if overwrite else read_folder(folder)
                if on_disk is not None and not self._is_base_of(folder, on_disk):
                    self._merge_onto(on_disk, folder)
                self._write(folder)
        except OSError as exc:
            raise BundleError(
                f"cannot save the bundle to {folder}: {describe_os_error(exc)}"
            ) from None
        return folder

    def _is_base_of(self, folder: Path, on_disk: OnDisk) -> bool:
        """True when the folder still holds the generation this bundle was loaded from
        or last saved there: nothing to merge."""
        return (
            self.path is not None
            and self.generation is not None
            and on_disk.generation == self.generation
            and os.path.realpath(self.path) == os.path.realpath(folder)
        )

    def _merge_onto(self, on_disk: OnDisk, folder: Path) -> None:
        """Make this bundle the folder's bundle plus this bundle's head changes."""
        ours = self._trunk_ref
        found = on_disk.doc.get("trunk")
        theirs: dict[str, Any] = found if isinstance(found, dict) else {}
        same_folder = self.path is not None and os.path.realpath(self.path) == os.path.realpath(
            folder
        )
        if theirs.get("fingerprint") != ours["fingerprint"]:
            if same_folder:
                raise BundleConflictError(
                    f"cannot save the bundle to {folder}: another writer saved it meanwhile "
                    f"(generation {on_disk.generation}) with trunk {theirs.get('name')!r} "
                    f"(fingerprint {theirs.get('fingerprint')}), and this bundle's trunk is "
                    f"{ours['name']!r} (fingerprint {ours['fingerprint']}); nothing was "
                    "written: load the bundle again and redo the change"
                )
            raise BundleConflictError(
                f"cannot save the bundle to {folder}: it holds a bundle on trunk "
                f"{theirs.get('name')!r} (fingerprint {theirs.get('fingerprint')}), not this "
                f"bundle's {ours['name']!r} (fingerprint {ours['fingerprint']}); save it "
                "elsewhere, or replace that bundle (save(..., overwrite=True))"
            )
        tensors = _tensors(on_disk, folder)
        disk = self._from_doc(on_disk.doc, tensors, folder, cache=None, trunk=None)
        changes = (
            dict(self._changes) if same_folder else {name: True for name in self._state.records}
        )
        records = dict(disk._state.records)
        infos = dict(disk._state.info)
        for name, keep in changes.items():
            if keep and name in self._state.records:
                records[name], infos[name] = self._state.records[name], self._state.info[name]
            else:
                records.pop(name, None)
                infos.pop(name, None)
        # their heads' kept data is in the folder; ours comes from memory or our folder
        for name in set(records) - {n for n, keep in changes.items() if keep}:
            rel = infos[name].get("data")
            if rel:
                self._data.pop(str(rel), None)
        if disk._trunk_ref["spec"] != ours["spec"]:  # e.g. a graph rewritten with their heads
            self._trunk_ref = disk._trunk_ref
            self._trunk_state = disk._trunk_state
            self._trunk = None
        self._state = self._state.replace(records, infos)

    def _write(self, folder: Path) -> None:
        """Write every file of this bundle into ``folder`` (its lock held): new files
        first, then the weights and ``bundle.json`` renamed into place, then what the
        saved bundle no longer names is removed."""
        from safetensors.numpy import save as st_save

        self._save_graph(folder)
        self._save_trunk_files(folder)
        generation = uuid.uuid4().hex
        doc = self.to_dict(generation)
        shared = self._trunk_weights
        if shared is not None and (folder / shared[0]).resolve() != shared[1]:
            shared = None  # saved elsewhere: the weights go into this folder
        if shared is not None:
            doc["trunk_weights"] = shared[0]
        text = json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=False) + "\n"
        tensors: dict[str, np.ndarray] = {}
        for name, (_, ts) in self._state.records.items():
            for key, arr in ts.items():
                tensors[f"heads/{name}/{key}"] = arr
        if shared is None and not self._trunk_in_graph():
            for key, arr in self._current_trunk_state().items():
                tensors[f"trunk/{key}"] = np.ascontiguousarray(arr)
        self._save_data(folder)
        blob = st_save(tensors, metadata={"generation": generation, "bundle_json": text})
        atomic_write_bytes(folder / HEADS_FILE, blob)
        atomic_write_text(folder / BUNDLE_JSON, text)
        collect_garbage(folder, text)
        self.path = folder
        self.generation = generation
        self._trunk_weights = shared
        self._changes = {}

    def _save_trunk_files(self, folder: Path) -> None:
        """Trunk parts that keep files in the bundle folder (a byte trunk's graph) put
        them there; bundle.json then names them. Decided from the spec, so a loaded
        bundle whose trunk was never built still brings its files along."""
        spec = self._trunk_ref["spec"]
        specs = spec.get("parts", []) if spec.get("type") == "composite" else [spec]
        if not any(p.get("type") == "byte" for p in specs):
            return
        trunk = self.trunk
        parts: list[Any] = trunk.parts if isinstance(trunk, CompositeTrunk) else [trunk]
        for part in parts:
            if not hasattr(part, "save_files"):
                continue
            graph, home = getattr(part, "graph", None), getattr(part, "folder", None)
            if graph and home is not None and Path(graph).name != graph:
                source = Path(home) / graph  # a tier's sub-bundle uses its parent's graph file
                if source.resolve() != (folder / graph).resolve():
                    part.graph, part.folder = source.name, source.parent  # saved elsewhere: a copy
            part.save_files(folder)
        self._trunk_ref = self._reference(trunk)

    def _trunk_in_graph(self) -> bool:
        """True when the trunk is a byte trunk whose ONNX graph in the bundle holds every
        weight unchanged: the weights are then stored once, in the graph."""
        if self._trunk_ref["spec"].get("type") != "byte" or not self._trunk_ref["spec"].get(
            "graph"
        ):
            return False
        return bool(getattr(self.trunk, "weights_in_graph", lambda: False)())

    def _onnx_trunk(self) -> Any:
        """The ONNX graph part of an exported bundle's trunk, or None."""
        spec = self._trunk_ref["spec"]
        specs = spec.get("parts", []) if spec.get("type") == "composite" else [spec]
        if not any(p.get("type") == "onnx" for p in specs):
            return None
        trunk = self.trunk
        parts = trunk.parts if isinstance(trunk, CompositeTrunk) else [trunk]
        return next(p for p in parts if hasattr(p, "graph_heads"))

    def _save_graph(self, folder: Path) -> None:
        """An exported bundle: bring its graph (and tokenizer) into ``folder`` and write the
        current heads into the graph when they changed. Graph files are named by
        their content; the one bundle.json names is the one in use."""
        graph = self._onnx_trunk()
        if graph is None:
            return
        from . import export

        for rel in (graph.file, graph.tokenizer_file):
            target = folder / rel
            if not target.exists():
                atomic_write_bytes(target, (graph.folder / rel).read_bytes())
        graph.folder = folder
        if isinstance(self.trunk, CompositeTrunk):
            return  # its graph holds the transformer part only
        fused = self._state.fused
        wanted = {} if fused is None else {n: s.digest for n, s in fused.specs.items()}
        if graph.graph_heads != wanted:
            sha = export.rewrite_heads(folder, graph, fused)
            graph.reload(export.graph_file_name(sha), sha)
            self._trunk_ref = self._reference(self.trunk)

    def finetune(
        self,
        texts: Sequence[str],
        tasks: Mapping[str, tuple[str, Sequence[Any]]],
        folder: str | os.PathLike[str],
        *,
        groups: Sequence[Any] | None = None,
        fields: Mapping[str, str] | None = None,
        epochs: int = 2,
        max_length: int = 128,
        batch_size: int = 16,
        lr: float = 2e-5,
        holdout: float = 0.2,
        seed: int = 0,
        progress: bool = False,
    ) -> FinetuneSummary:
        """Fine-tune the trunk on ``tasks`` (LP-FT) and refit every head on the new trunk.

        ``tasks``: head name -> (kind, labels aligned with ``texts``). The
        fine-tuned transformer is written inside the bundle ``folder``
        (``trunk-ID/``, safetensors) and the bundle points to it with a new
        fingerprint. Every head is then refitted on the new embeddings, with
        its own training data: the data given here for the heads in
        ``tasks``, the data the bundle kept for the others. A head whose data
        is missing is removed and reported in ``dropped``, never kept on a
        trunk it was not trained on. Call :meth:`save` afterwards (the CLI does).

        Temperatures and thresholds are fitted again, on texts the new trunk
        did not see: a ``holdout`` share of ``texts`` (grouped by ``groups``)
        is left out of fine-tuning, and each head is fitted on its rows the
        trunk saw and calibrated on the others (no refit on all rows: the
        trunk's embeddings of its own training texts are more separable than
        those of new texts, so a temperature fitted on them is too low). A head
        whose rows were all seen by the trunk is calibrated on a split of them
        and says so (``metrics["calibrated_on_trunk_training_rows"]``).
        """
        from .finetune import finetune_transformer
        from .trunks import TransformerTrunk

        folder = Path(folder)
        trunk = self.trunk
        parts = trunk.parts if isinstance(trunk, CompositeTrunk) else [trunk]
        neural = [i for i, p in enumerate(parts) if isinstance(p, TransformerTrunk)]
        if len(neural) != 1:
            exported = self._onnx_trunk() is not None
            raise ConfigError(
                "an exported (ONNX) bundle cannot be fine-tuned: fine-tune the bundle it was "
                "exported from and export it again"
                if exported
                else f"fine-tuning needs a trunk with exactly one transformer part; this "
                f"bundle's trunk is {self.trunk_name!r}"
            )
        from .heads.linear import check_kind

        texts = check_texts(texts)
        for name, (kind, labels) in tasks.items():
            check_head_name(name)
            check_kind(kind)
            if len(labels) != len(texts):
                raise DataError(f"task {name!r}: {len(texts)} texts but {len(labels)} labels")
        if not 0 <= holdout < 1:
            raise ConfigError(f"holdout must be in [0, 1); got {holdout}")
        source = parts[neural[0]]
        assert isinstance(source, TransformerTrunk)
        if holdout > 0:
            first_kind, first_labels = next(iter(tasks.values()))
            tune_idx, _ = _split(first_kind, list(first_labels), groups, holdout, seed)
        else:
            tune_idx = np.arange(len(texts))
        tune_texts = [texts[i] for i in tune_idx]
        tune_tasks = {}
        for task_name, (task_kind, task_labels) in tasks.items():
            as_list = list(task_labels)
            tune_tasks[task_name] = (task_kind, [as_list[i] for i in tune_idx])
        folder.mkdir(parents=True, exist_ok=True)
        rel = f"trunk-{uuid.uuid4().hex[:12]}"
        report = finetune_transformer(
            source.path,
            tune_texts,
            tune_tasks,
            folder / rel,
            epochs=epochs,
            max_length=max_length,
            batch_size=batch_size,
            lr=lr,
            seed=seed,
            progress=progress,
        )
        tuned = TransformerTrunk(
            folder / rel,
            name=f"{source.name}-ft",
            pooling=source.pooling,
            max_length=source.max_length,
        )
        spec = tuned.spec()
        spec["path"] = rel  # relative: the bundle folder can move
        new_parts = list(parts)
        new_parts[neural[0]] = tuned
        new_trunk: Trunk = (
            CompositeTrunk(new_parts, trunk.weights) if isinstance(trunk, CompositeTrunk) else tuned
        )
        # the data of every head, before the heads change
        refits: dict[str, tuple[list[str], list[Any], Any, str]] = {}
        dropped: list[str] = []
        for name in self.heads:
            if name in tasks:
                continue
            kept = self.training_data(name)
            if kept is None:
                dropped.append(name)
                continue
            info = self.head_info[name]
            refits[name] = (kept[0], kept[1], kept[2], str(info.get("field", name)))
        for name, (_, labels) in tasks.items():
            field_name = (fields or {}).get(name, name)
            refits[name] = (texts, list(labels), groups, field_name)
        old_info = dict(self.head_info)
        old_C = {n: getattr(h, "C", 1.0) for n, h in self.heads.items()}
        old_thr = {n: getattr(h, "thresholds", "f1") for n, h in self.heads.items()}
        kinds = {n: old_info[n]["kind"] for n in old_info}
        kinds.update({n: k for n, (k, _) in tasks.items()})
        with self._lock:
            self._trunk = new_trunk
            ref = self._reference(new_trunk)
            if isinstance(new_trunk, CompositeTrunk):
                ref["spec"]["parts"][neural[0]] = spec
            else:
                ref["spec"] = spec
            self._trunk_ref = ref
            self._state = _State()
        seen = set(tune_texts)
        summaries = []
        for name, (t, labels, g, field_name) in refits.items():
            info = old_info.get(name, {})
            common: dict[str, Any] = {
                "kind": kinds[name],
                "field": field_name,
                "head": str(info.get("head_type", "linear")),
                "C": old_C.get(name, 1.0),
                "thresholds": old_thr.get(name, "f1"),
                "progress": progress,
                "seed": seed,
            }
            used = [i for i, text in enumerate(t) if text in seen]
            fresh = [i for i, text in enumerate(t) if text not in seen]
            if used and fresh:  # fit on rows the trunk saw, calibrate on the others
                summary = self.fit_head(
                    name,
                    [t[i] for i in used],
                    [labels[i] for i in used],
                    val_texts=[t[i] for i in fresh],
                    val_labels=[labels[i] for i in fresh],
                    refit=False,
                    **common,
                )
            else:  # the trunk saw none of these texts, or all of them
                summary = self.fit_head(name, t, labels, groups=g, **common)
                if not fresh:
                    summary.metrics["calibrated_on_trunk_training_rows"] = True  # = head_info's
            summaries.append(summary)
        self.path = folder
        return FinetuneSummary(report=report, heads=summaries, dropped=dropped)

    def _save_data(self, folder: Path) -> None:
        """Write each kept training set once (content-addressed); the ones no head uses any
        more go after the save (``collect_garbage``)."""
        wanted = {str(i["data"]) for i in self._state.info.values() if i.get("data")}
        for rel in sorted(wanted):
            target = folder / rel
            if target.exists():
                continue
            if rel not in self._data:
                source = None if self.path is None else self.path / rel
                if source is not None and source.is_file() and source.resolve() != target.resolve():
                    atomic_write_bytes(target, source.read_bytes())
                continue
            texts, labels, groups = self._data[rel]
            lines = []
            for i, (t, lab) in enumerate(zip(texts, labels, strict=True)):
                row: dict[str, Any] = {"text": t, "label": lab}
                if groups is not None:
                    row["group"] = groups[i]
                lines.append(json.dumps(row, ensure_ascii=False))
            atomic_write_bytes(target, gzip.compress(("\n".join(lines) + "\n").encode(), 6))

    def training_data(self, name: str) -> tuple[list[str], list[Any], list[Any] | None] | None:
        """The texts, labels and groups head ``name`` was trained on, if the bundle kept them."""
        info = self.head_info.get(name)
        if info is None:
            raise UnknownHeadError(
                f"unknown head {name!r}; the bundle has: {', '.join(self.heads)}"
            )
        rel = info.get("data")
        if not rel:
            return None
        if rel in self._data:
            return self._data[rel]
        path = None if self.path is None else self.path / rel
        if path is None or not path.is_file():
            raise BundleError(
                f"the kept training data of head {name!r} ({rel}) is missing from "
                f"{self.path}; the head cannot be refitted (train it again)"
            )
        texts, labels, groups = [], [], []
        try:
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                for line in fh:
                    row = json.loads(line)
                    texts.append(row["text"])
                    labels.append(row["label"])
                    groups.append(row.get("group"))
        except (OSError, EOFError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise BundleError(
                f"cannot read {path}, the kept training data of head {name!r}: {exc}"
            ) from None
        data = (texts, labels, None if all(g is None for g in groups) else groups)
        if data_hash(texts, labels) != info.get("data_hash"):
            raise BundleError(f"{path}: training data of head {name!r} does not match its hash")
        self._data[rel] = data
        return data

    def _current_trunk_state(self) -> dict[str, np.ndarray]:
        """Fitted arrays of the trunk (idf of a hashing part), stored in heads.safetensors."""
        if self._trunk is not None and hasattr(self._trunk, "state"):
            return dict(self._trunk.state())
        return dict(self._trunk_state)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        cache: str | Path | EmbeddingCache | None = _DEFAULT,
        trunk: Trunk | None = None,
        tier: int | None = None,
        limits: HeadLimits | None = None,
    ) -> Bundle:
        """Load a bundle folder. The trunk is built on first use (or given as ``trunk``).

        ``path`` may also name a built-in bundle (``"content"``), see
        :func:`bundle_folder`. ``tier``: for a byte bundle, the tier (nested
        embedding size) to answer at; a tier other than the bundle's own loads
        the sub-bundle fitted at that tier (``tiers/<tier>/``). ``limits``: the caps
        on heads added later (a bundle loads whatever its heads hold).
        """
        folder = bundle_folder(path, tier)
        meta_file = folder / BUNDLE_JSON
        on_disk = read_folder(folder)
        if on_disk is None:
            raise BundleError(f"no bundle at {folder} (missing {BUNDLE_JSON})")
        doc = on_disk.doc
        tensors = _tensors(on_disk, folder)
        shared = doc.get("trunk_weights")
        bundle = cls._from_doc(doc, tensors, folder, cache=cache, trunk=trunk)
        if limits is not None:
            bundle.limits = limits
        bundle.path = folder
        bundle.generation = doc.get("generation")
        if shared is not None:
            bundle._trunk_weights = (shared, (folder / shared).resolve())
        if tier is not None and bundle.tier != tier:
            raise BundleError(f"{meta_file}: expected a bundle at tier {tier}, found {bundle.tier}")
        return bundle

    @classmethod
    def _from_doc(
        cls,
        doc: Any,
        tensors: dict[str, np.ndarray],
        folder: Path,
        *,
        cache: str | Path | EmbeddingCache | None,
        trunk: Trunk | None,
    ) -> Bundle:
        where = folder / BUNDLE_JSON
        if not isinstance(doc, dict) or doc.get("format") != "manyheads-bundle":
            raise BundleError(f"{where} is not a manyheads bundle file")
        version = doc.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise BundleError(
                f"{where} has format version {version!r}; this manyheads reads up to "
                f"{FORMAT_VERSION} (upgrade manyheads)"
            )
        ref = doc.get("trunk")
        if not isinstance(ref, dict) or not {"name", "fingerprint", "dim", "spec"} <= set(ref):
            raise BundleError(f"{where}: 'trunk' needs name, fingerprint, dim and spec")
        dim = ref["dim"]
        if (
            not isinstance(ref["name"], str)
            or not isinstance(ref["fingerprint"], str)
            or not isinstance(dim, int)
            or isinstance(dim, bool)
            or dim < 1
            or not isinstance(ref["spec"], dict)
        ):
            raise BundleError(
                f"{where}: 'trunk' needs a string name and fingerprint, a positive integer dim "
                f"and a spec object; got name {ref['name']!r}, fingerprint "
                f"{ref['fingerprint']!r}, dim {dim!r}"
            )
        try:
            check_spec(ref["spec"])
        except ConfigError as exc:
            raise BundleError(f"{where}: {exc}") from None
        bundle = cls.__new__(cls)
        bundle.limits = HeadLimits()
        bundle._changes = {}
        bundle._trunk = None
        bundle._data = {}
        bundle._trunk_state = {
            key[len("trunk/") :]: arr for key, arr in tensors.items() if key.startswith("trunk/")
        }
        # one name for one trunk: older bundles wrote the tfidf preset as "hashing"
        bundle._trunk_ref = {**ref, "name": spec_name(ref["spec"]) or ref["name"]}
        bundle._cache_arg = cache
        bundle._cache = None
        bundle._state = _State()
        bundle._lock = threading.RLock()
        bundle.path = folder
        bundle.generation = None
        bundle._trunk_weights = None
        if trunk is not None:
            if trunk.fingerprint != ref["fingerprint"]:
                raise FingerprintMismatchError(
                    f"the bundle was trained on trunk fingerprint {ref['fingerprint']}, "
                    f"the trunk given has fingerprint {trunk.fingerprint}"
                )
            bundle._trunk = trunk
        records: dict[str, Record] = {}
        infos: dict[str, dict[str, Any]] = {}
        heads_doc = doc.get("heads") or {}
        if not isinstance(heads_doc, dict):
            raise BundleError(f"{where}: 'heads' must be an object")
        for name, record in heads_doc.items():
            try:
                check_head_name(name)
            except DataError as exc:
                raise BundleError(f"{where}: {exc}") from None
            if not isinstance(record, dict):
                raise BundleError(f"{where}: head {name!r} must be an object")
            ts = {
                key.rsplit("/", 1)[1]: arr
                for key, arr in tensors.items()
                if key.startswith(f"heads/{name}/")
            }
            info = {
                k: v
                for k, v in record.items()
                if k not in ("type", "labels", "temperature", "thresholds", "params")
            }
            if info.get("trunk_fingerprint", ref["fingerprint"]) != ref["fingerprint"]:
                raise FingerprintMismatchError(
                    f"{where}: head {name!r} was trained on trunk fingerprint "
                    f"{info['trunk_fingerprint']}, the bundle's trunk is {ref['fingerprint']}"
                )
            records[name] = (record, ts)
            infos[name] = info
        try:  # checks every head's record and tensor shapes
            bundle._state = _State.build(records, infos)
        except DataError as exc:
            raise BundleError(f"{where}: {exc}") from exc
        return bundle

    def __repr__(self) -> str:
        return f"Bundle(trunk={self.trunk_name!r}, heads={list(self._state.heads)})"


def _shared_trunk_weights(folder: Path, rel: Any) -> dict[str, np.ndarray]:
    """The ``trunk/`` tensors of the file ``rel`` (a tier's sub-bundle: its parent's
    ``heads.safetensors``); checked against the fingerprint when the trunk is built."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    where = folder / BUNDLE_JSON
    if not isinstance(rel, str) or Path(rel).name != HEADS_FILE:
        raise BundleError(f"{where}: 'trunk_weights' must name a {HEADS_FILE} file, got {rel!r}")
    try:
        tensors = load_file(str(folder / rel))
    except FileNotFoundError:
        raise BundleError(
            f"{where}: the trunk weights it uses ({folder / rel}) are missing; a tier's "
            "bundle stays inside its parent bundle's tiers/ folder (copy the parent whole)"
        ) from None
    except (OSError, SafetensorError, ValueError) as exc:
        raise BundleError(f"cannot read {folder / rel}: {exc}") from exc
    return {k: v for k, v in tensors.items() if k.startswith("trunk/")}


def _tensors(on_disk: OnDisk, folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of a bundle on disk: its weights file's, and the trunk weights of
    the file its ``trunk_weights`` names (a tier's sub-bundle: its parent's)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load as st_load

    tensors: dict[str, np.ndarray] = {}
    if on_disk.blob is not None:
        try:
            tensors = st_load(on_disk.blob)
        except (SafetensorError, ValueError) as exc:
            raise BundleError(f"cannot read {folder / HEADS_FILE}: {exc}") from None
    shared = on_disk.doc.get("trunk_weights")
    if shared is not None:
        tensors.update(_shared_trunk_weights(folder, shared))
    return tensors
