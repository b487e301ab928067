"""A bundle: one trunk reference plus named heads; every answer from one trunk pass.

A bundle is saved as a folder (:mod:`~manyheads.bundle.format`,
:mod:`~manyheads.bundle.store`): ``bundle.json`` and ``heads.safetensors``,
written atomically, holding the folder's writers' lock. A bundle saved into the
folder it was loaded from, which another writer saved meanwhile, lays its own
head changes (added, replaced, removed heads) onto what is on disk now, so no
head another writer saved is lost; a change of trunk on either side cannot be
merged and is refused (:class:`~manyheads.errors.BundleConflictError`).

Loading and predicting need numpy and the trunk's own runtime only. Training a
head (:meth:`Bundle.fit_head`), fine-tuning (:meth:`Bundle.finetune`) and
evaluating (:meth:`Bundle.evaluate`) hand over to :mod:`manyheads.train` and
:mod:`manyheads.evaluate` when called.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cache import EmbeddingCache
from ..errors import BundleError, DataError, FingerprintMismatchError, UnknownHeadError, require
from ..heads import AnyHead, FusedHeads, any_head_from_record, any_head_to_record, check_head_name
from ..heads.decode import check_scores
from ..heads.record import HeadLimits, check_info, check_label_values
from ..trunks import Features, Trunk, TrunkBase, load_trunk
from ..trunks.base import check_texts
from ..trunks.registry import spec_tier
from .files import BundleFolder
from .format import (
    KeptData,
    data_hash,
    record_and_info,
)
from .pieces import mean_of_pieces, pieces_of
from .recheck import trunk_probabilities
from .state import HeadSet, Record
from .steps import PredictSteps, predict_steps, with_blanks
from .store import (
    DATA_DIR,
)

if TYPE_CHECKING:
    from typing import Unpack

    from ..evaluate.protocols import ProtocolOptions
    from ..train.finetune import FinetuneOptions, FinetuneSummary
    from ..train.fit import FitOptions, HeadSummary

__all__ = ["Bundle"]

_DEFAULT = "default"


class Bundle(BundleFolder):
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
        built = load_trunk(trunk)
        self._setup(self._reference(built), {}, cache, limits)
        self._trunk: TrunkBase | None = built

    def _setup(
        self,
        ref: dict[str, Any],
        trunk_state: dict[str, np.ndarray],
        cache: Any,
        limits: HeadLimits | None,
    ) -> None:
        self.limits = limits or HeadLimits()
        # head changes since the generation this bundle was loaded from or last saved:
        # name -> True (added or replaced) / False (removed); a save merges them
        self._changes: dict[str, bool] = {}
        self._trunk = None
        self._trunk_state = dict(trunk_state)
        self._data: dict[str, KeptData] = {}
        self._trunk_ref = ref
        self._cache_arg = cache
        self._cache: EmbeddingCache | None = None
        self._state = HeadSet()
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

    def with_trunk(self, trunk: TrunkBase) -> Bundle:
        """This bundle's heads and kept data on another trunk object that computes the
        same vectors (same fingerprint): an exported graph of this bundle's trunk."""
        if trunk.fingerprint != self.trunk_fingerprint:
            raise FingerprintMismatchError(
                f"the bundle's trunk has fingerprint {self.trunk_fingerprint}, the trunk "
                f"given has {trunk.fingerprint}"
            )
        other = self.copy()
        other._trunk = trunk
        other._trunk_ref = self._reference(trunk)
        other._trunk_state = self._current_trunk_state()
        return other

    @property
    def trunk_reference(self) -> dict[str, Any]:
        """The trunk as ``bundle.json`` names it: name, fingerprint, dim, spec."""
        return copy.deepcopy(self._trunk_ref)

    # -- trunk and cache ---------------------------------------------------

    @staticmethod
    def _reference(trunk: TrunkBase) -> dict[str, Any]:
        """What bundle.json says of the trunk (fingerprint ``None`` until it is fitted)."""
        return {
            "name": trunk.name,
            "fingerprint": None if trunk.needs_fit else trunk.fingerprint,
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
            trunk.fit(check_texts(texts))
            self._trunk_state = dict(trunk.state())
            # the stored spec stays (a fine-tuned part's folder is relative to the bundle)
            self._trunk_ref = {**self._reference(trunk), "spec": self._trunk_ref["spec"]}

    def replace_trunk(self, trunk: TrunkBase, spec: dict[str, Any]) -> None:
        """Put ``trunk`` (stored as ``spec``) in place of the bundle's trunk and drop every
        head: they were trained on the old one (fine-tuning refits them)."""
        with self._lock:
            removed = dict.fromkeys(self._state.records, False)
            self._trunk = trunk
            self._trunk_ref = {**self._reference(trunk), "spec": spec}
            self._trunk_state = dict(trunk.state())
            self._state = HeadSet()
            self._changes.update(removed)

    @property
    def trunk(self) -> TrunkBase:
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
        return spec_tier(self._trunk_ref["spec"])

    @property
    def cache(self) -> EmbeddingCache | None:
        if self._cache is None and self._cache_arg is not None:
            arg = self._cache_arg
            if isinstance(arg, EmbeddingCache):
                self._cache = arg
            else:
                self._cache = EmbeddingCache(None if arg == _DEFAULT else Path(arg))
        return self._cache

    @property
    def cache_setting(self) -> Any:
        """The cache as this bundle was given it (``"default"``, a path, an
        :class:`EmbeddingCache` or None): bundles loaded alongside it get the same."""
        return self._cache_arg

    def embed(
        self, texts: Sequence[str], *, use_cache: bool = True, progress: bool = False
    ) -> Features:
        """Trunk vectors of ``texts`` (a CSR matrix when a trunk part is sparse).

        With the cache, only texts unseen by the trunk (or, for a composite
        trunk, by each of its cacheable parts) reach it.
        """
        texts = check_texts(texts)
        self._check_trunk_fitted()
        trunk = self.trunk
        cache = self.cache if use_cache else None
        if cache is None:
            return trunk.encode_features(texts, progress=progress)
        return trunk.combine([self._embed_part(p, texts, cache, progress) for p in trunk.parts])

    def _check_trunk_fitted(self) -> None:
        if self.trunk_needs_fit:
            raise BundleError(
                f"the trunk {self.trunk_name!r} must be fitted on training texts first "
                "(Bundle.fit_trunk, or train a head)"
            )

    @staticmethod
    def _embed_part(
        part: TrunkBase, texts: list[str], cache: EmbeddingCache, progress: bool
    ) -> Features:
        if not part.cacheable:
            return part.encode_features(texts, progress=progress)
        fp, dim = part.cache_key, int(part.dim)
        found = cache.get(fp, texts, dim)
        todo = list(dict.fromkeys(t for t, v in zip(texts, found, strict=True) if v is None))
        fresh: dict[str, np.ndarray] = {}
        if todo:
            vecs = part.encode(todo, progress=progress)
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

    @property
    def fused_heads(self) -> FusedHeads | None:
        """Every head's first layer in one matrix (``None`` without heads)."""
        return self._state.fused

    def _unknown(self, name: str) -> UnknownHeadError:
        return UnknownHeadError(
            f"unknown head {name!r}; the bundle has: {', '.join(self._state.records) or '-'}"
        )

    def labels(self, name: str) -> list[Any]:
        """The labels (classes) head ``name`` answers with, in its output order."""
        fused = self._state.fused
        if fused is None or name not in fused.specs:
            raise self._unknown(name)
        return list(fused.specs[name].labels)

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
            raise self._unknown(unknown[0])
        if not names:
            raise DataError("no head names given")
        return names

    def fit_head(
        self,
        name: str,
        texts: Sequence[str],
        labels: Sequence[Any],
        kind: str = "multiclass",
        **options: Unpack[FitOptions],
    ) -> HeadSummary:
        """Train (or replace) head ``name`` on ``texts`` / ``labels``: see
        :func:`manyheads.train.fit.fit_head` for the options (``groups``, validation
        rows or ``val_fraction``, ``C``, ``head``, ``thresholds``, ``class_weight``,
        ``refit``, ``keep_data``, ``seed``, ...) and how the head is split, fitted,
        calibrated and kept."""
        from ..train.fit import fit_head

        return fit_head(self, name, texts, labels, kind, **options)

    def add_head(
        self,
        name: str,
        head: AnyHead,
        *,
        info: dict[str, Any] | None = None,
        data: KeptData | None = None,
    ) -> None:
        """Add or replace one head. ``info['trunk_fingerprint']`` must match the trunk.
        ``data``: its training texts, labels and groups, kept in the bundle
        (``data/HASH.jsonl.gz``) so it can be refitted when the trunk changes."""
        from ..heads.base import HeadBase

        name = check_head_name(name)
        if not isinstance(head, HeadBase) or not head.fitted:
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
        where = f"head {name!r}"
        info = check_info(info, where)
        record = any_head_to_record(head)
        check_label_values(record[0].get("labels"), where)
        self.limits.check_labels(record[0]["labels"], where)
        with self._lock:
            if data is not None:
                rel = f"{DATA_DIR}/{data_hash(data[0], data[1])[:24]}.jsonl.gz"
                info["data"] = rel
                self._data[rel] = data
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
                raise self._unknown(name)
            records = {k: v for k, v in self._state.records.items() if k != name}
            infos = {k: v for k, v in self._state.info.items() if k != name}
            self._state = self._state.replace(records, infos)
            self._changes[name] = False

    def export_head(self, name: str) -> Record:
        """One head as (JSON record, tensors) — the form the bundle stores it in."""
        state = self._state
        if name not in state.heads:
            raise self._unknown(name)
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
            head = any_head_from_record(record, tensors)
        except DataError as exc:
            raise DataError(f"head {name!r}: {exc}") from None
        # a head from elsewhere brings no kept training data into this bundle
        info = {k: v for k, v in record_and_info(record).items() if k != "data"}
        info["kind"] = head.kind
        self.add_head(name, head, info=info)

    # -- prediction --------------------------------------------------------

    def predict(
        self,
        texts: Sequence[str],
        heads: Sequence[str] | str | None = None,
        *,
        use_cache: bool = False,
        max_chars: int | None = None,
        scores: str = "all",
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

        ``scores``: the class scores each answer keeps: every class's (``"all"``), the
        best five, highest first (``"top"``), or none (``"none"``: no ``scores`` key).
        """
        state = self._state  # one snapshot for the whole call
        names = self.resolve_heads(heads)
        check_scores(scores)
        texts = check_texts(texts)
        assert state.fused is not None

        def answer(filled: list[str]) -> list[dict[str, Any]]:
            return self._predict_state(state, filled, names, use_cache, max_chars, scores)

        return with_blanks(state.fused, texts, names, scores, answer)

    def predict_steps(
        self,
        texts: Sequence[str],
        heads: Sequence[str] | str | None = None,
        *,
        max_chars: int | None = None,
        scores: str = "all",
    ) -> PredictSteps:
        """:meth:`predict`'s answers, the trunk's work done a step at a time (a caller
        does other work between two): ``steps.step(budget)`` (trunk work, in
        ``trunk.work_unit``) until ``steps.done``, then ``steps.answers()``. See
        :func:`manyheads.bundle.steps.predict_steps`."""
        state = self._state
        names = self.resolve_heads(heads)
        check_scores(scores)
        texts = check_texts(texts)
        self._check_trunk_fitted()

        def whole(filled: list[str]) -> list[dict[str, Any]]:
            return self._predict_state(state, filled, names, False, max_chars, scores)

        return predict_steps(state, self.trunk, texts, names, max_chars, scores, whole=whole)

    def _predict_state(
        self,
        state: HeadSet,
        texts: list[str],
        names: list[str],
        use_cache: bool,
        max_chars: int | None,
        scores: str,
    ) -> list[dict[str, Any]]:
        assert state.fused is not None
        cut = pieces_of(texts, max_chars)
        if cut is None:
            probs = self._probabilities(state, texts, names, use_cache)
            return state.fused.answers(probs, names, scores)
        pieces, owner, share = cut
        probs = self._probabilities(state, pieces, names, use_cache)
        return state.fused.answers(mean_of_pieces(probs, owner, share, len(texts)), names, scores)

    def predict_proba(
        self, texts: Sequence[str], heads: Sequence[str] | str | None = None
    ) -> dict[str, np.ndarray]:
        """``{head: probabilities}`` (texts x outputs; binary heads: ``[1 - p, p]``)."""
        state = self._state
        names = self.resolve_heads(heads)
        return self._probabilities(state, check_texts(texts), names, False)

    def _probabilities(
        self, state: HeadSet, texts: list[str], names: list[str], use_cache: bool
    ) -> dict[str, np.ndarray]:
        """Every requested head's probabilities from one trunk pass.

        An exported bundle's graph computes the heads it holds; a head added
        since (not yet written into the graph) is applied to the graph's
        embedding here.
        """
        fused = state.fused
        assert fused is not None
        if use_cache:
            return fused.probabilities(self.embed(texts, use_cache=True), names)
        self._check_trunk_fitted()
        # an int8 export's unsure answers come again from its float graph
        return trunk_probabilities(self.trunk, fused, texts, names)

    def evaluate(
        self,
        texts: Sequence[str],
        labels: Mapping[str, Sequence[Any]],
        *,
        protocol: str = "holdout",
        report: str | os.PathLike[str] | None = None,
        progress: bool = False,
        **options: Unpack[ProtocolOptions],
    ) -> dict[str, dict[str, Any]]:
        """Metrics of each head in ``labels`` on these texts (one trunk pass for all):
        ``protocol="holdout"`` scores the heads themselves
        (:func:`manyheads.evaluate.holdout.evaluate_heads`; ``report``: a folder for
        ``report.html`` / ``report.json``); ``"mteb"`` and ``"kfold"`` fit fresh heads
        like them (:mod:`manyheads.evaluate.protocols`, which says the options)."""
        from ..evaluate import holdout, protocols

        names = self.resolve_heads(list(labels))
        heads = {n: self._state.heads[n] for n in names}
        protocols.check_protocol(protocol, [k for k, v in options.items() if v is not None], report)
        protocols.check_values({n: h.kind for n, h in heads.items()}, len(texts), options)
        if report is not None:
            require("matplotlib", "report")  # before the trunk pass
        embed = partial(self.embed, progress=progress)
        if protocol != "holdout":
            return protocols.evaluate_with(
                protocol, heads, embed, texts, labels, options, progress=progress
            )
        return holdout.evaluate_heads(heads, embed(texts), labels, report=report)

    # -- persistence -------------------------------------------------------

    def finetune(
        self,
        texts: Sequence[str],
        tasks: Mapping[str, tuple[str, Sequence[Any]]],
        folder: str | os.PathLike[str],
        **options: Unpack[FinetuneOptions],
    ) -> FinetuneSummary:
        """Fine-tune the trunk on ``tasks`` (LP-FT) and refit every head on the new trunk:
        see :func:`manyheads.train.finetune.finetune_bundle` for the options and how.
        Call :meth:`save` afterwards (the CLI does)."""
        from ..train.finetune import finetune_bundle

        return finetune_bundle(self, texts, tasks, folder, **options)

    def __repr__(self) -> str:
        return f"Bundle(trunk={self.trunk_name!r}, heads={list(self._state.heads)})"
