"""A bundle: one trunk reference plus named heads; every answer from one trunk pass.

A :class:`Bundle` holds one :class:`~manyheads.bundle.saved.BundleState` (the trunk
reference, the head set, the kept data, where and as which generation it was saved:
plain, frozen data, swapped whole on every change), the trunk built from it, its
embedding cache and its caps. Its folder is read and written by the functions of
:mod:`~manyheads.bundle.files` (``bundle.json`` and ``heads.safetensors``, written
atomically, holding the folder's writers' lock). A bundle saved into the folder it
was loaded from, which another writer saved meanwhile, lays its own head changes
(added, replaced, removed heads) onto what is on disk now, so no head another writer
saved is lost; a change of trunk on either side cannot be merged and is refused
(:class:`~manyheads.errors.BundleConflictError`).

Loading and predicting need numpy and the trunk's own runtime only; the modules that
do them (every module of this package but this one) never import training.
Training a head (:meth:`Bundle.fit_head`), fine-tuning (:meth:`Bundle.finetune`) and
evaluating (:meth:`Bundle.evaluate`) hand over to :mod:`manyheads.train` and
:mod:`manyheads.evaluate` when called.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cache import EmbeddingCache
from ..errors import BundleError, DataError, FingerprintMismatchError, UnknownHeadError
from ..heads import AnyHead, FusedHeads
from ..heads.decode import Scores, check_scores
from ..heads.record import HeadLimits
from ..trunks import Features, Trunk, TrunkBase, load_trunk
from ..trunks.base import check_texts
from ..trunks.device import Device, DeviceLike, resolve_device
from ..trunks.registry import spec_tier
from .answer import answers_of, cached_features, saw
from .entry import head_entry, head_from_export
from .files import build_trunk, load_folder, read_training_data, save_folder, trunk_arrays
from .fitting import Fitting
from .format import KeptData, data_hash
from .production import InProduction
from .recheck import trunk_probabilities
from .saved import BundleState, trunk_reference
from .state import HeadSet, Record
from .steps import PredictSteps, predict_steps, with_blanks
from .store import BUNDLE_JSON, DATA_DIR
from .tiers import Tiered

if TYPE_CHECKING:
    from typing import Unpack

    from typing_extensions import Self

    from ..evaluate.run import EvaluateOptions
    from ..train.finetune import FinetuneOptions, FinetuneSummary
    from ..train.fit import FitOptions, HeadSummary

__all__ = ["Bundle"]

_DEFAULT = "default"


class Bundle(InProduction, Tiered, Fitting):
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
    device : ``"auto"`` (default), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``
        Where the trunk runs: ``auto`` is the first GPU torch sees, else the CPU. A
        trunk part that cannot run on a GPU stays on the CPU (see the GPU guide).
    """

    _trunk: TrunkBase | None  # built from the state on first use

    def __init__(
        self,
        trunk: str | Path | dict[str, Any] | Trunk = "minilm",
        *,
        cache: str | Path | EmbeddingCache | None = _DEFAULT,
        limits: HeadLimits | None = None,
        device: DeviceLike = "auto",
    ) -> None:
        built = load_trunk(trunk)
        self._setup(BundleState(trunk=trunk_reference(built)), cache, limits, device)
        self._trunk = built.on_device(self._device)

    def _setup(
        self, saved: BundleState, cache: Any, limits: HeadLimits | None, device: DeviceLike
    ) -> None:
        self._device = resolve_device(device)
        self.limits = limits or HeadLimits()
        self._saved = saved
        self._trunk = None
        self._cache_arg = cache
        self._cache: EmbeddingCache | None = None
        self._lock = threading.RLock()

    @property
    def state(self) -> BundleState:
        """What this bundle is now, as one frozen record."""
        return self._saved

    @property
    def path(self) -> Path | None:
        """The folder this bundle was loaded from or last saved to (files its trunk
        names are found there)."""
        return self._saved.path

    @path.setter
    def path(self, folder: Path | None) -> None:
        with self._lock:
            self._saved = self._saved.replace(path=folder)

    @property
    def generation(self) -> str | None:
        """The generation of the ``bundle.json`` last loaded or saved."""
        return self._saved.generation

    def copy(self) -> Bundle:
        """A bundle sharing this one's trunk, cache and heads, whose head set and kept
        data change independently (a service changes a copy, saves it, then swaps)."""
        other = copy.copy(self)
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
        other._saved = self._saved.replace(
            trunk=trunk_reference(trunk), trunk_state=trunk_arrays(self._saved, self._trunk)
        )
        other._trunk = trunk
        return other

    @property
    def trunk_reference(self) -> dict[str, Any]:
        """The trunk as ``bundle.json`` names it: name, fingerprint, dim, spec."""
        return copy.deepcopy(dict(self._saved.trunk))

    # -- trunk and cache ---------------------------------------------------

    @property
    def trunk_needs_fit(self) -> bool:
        """True for a new bundle whose trunk has parts fitted on training texts (idf)."""
        return self._saved.fingerprint is None

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
            # the stored spec stays (a fine-tuned part's folder is relative to the bundle)
            self._saved = self._saved.replace(
                trunk={**trunk_reference(trunk), "spec": self._saved.trunk["spec"]},
                trunk_state=dict(trunk.state()),
            )

    def replace_trunk(self, trunk: TrunkBase, spec: dict[str, Any]) -> None:
        """Put ``trunk`` (stored as ``spec``) in place of the bundle's trunk and drop every
        head: they were trained on the old one (fine-tuning refits them)."""
        with self._lock:
            saved = self._saved
            removed = dict.fromkeys(saved.heads.records, False)
            self._saved = saved.replace(
                trunk={**trunk_reference(trunk), "spec": spec},
                trunk_state=dict(trunk.state()),
            ).with_heads(HeadSet(), removed)
            self._trunk = trunk.on_device(self._device)

    @property
    def trunk(self) -> TrunkBase:
        """The trunk, built on first use (a loaded bundle defers it) and checked."""
        with self._lock:
            if self._trunk is None:
                self._trunk = build_trunk(self._saved).on_device(self._device)
            return self._trunk

    @property
    def device(self) -> Device:
        """The device the trunk runs on (as asked; a part that cannot run there runs
        on the CPU: ``bundle.trunk.device`` says where the trunk does)."""
        return self._device

    @property
    def trunk_fingerprint(self) -> str:
        return str(self._saved.trunk["fingerprint"])

    @property
    def trunk_name(self) -> str:
        return str(self._saved.trunk["name"])

    @property
    def dim(self) -> int:
        return int(self._saved.trunk["dim"])

    @property
    def tier(self) -> int | None:
        """The tier (nested embedding size) a byte trunk serves; ``None`` for other trunks."""
        return spec_tier(self._saved.trunk["spec"])

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
        return cached_features(self.trunk, texts, self.cache if use_cache else None, progress)

    def _check_trunk_fitted(self) -> None:
        if self.trunk_needs_fit:
            raise BundleError(
                f"the trunk {self.trunk_name!r} must be fitted on training texts first "
                "(Bundle.fit_trunk, or train a head)"
            )

    # -- heads -------------------------------------------------------------

    @property
    def heads(self) -> Mapping[str, AnyHead]:
        """``{name: head}`` (read-only view of the current head set)."""
        return self._saved.heads.heads

    @property
    def head_info(self) -> Mapping[str, dict[str, Any]]:
        """Per head: kind, field, validation metrics, training-data hash, created time, ..."""
        return self._saved.heads.info

    @property
    def fused_heads(self) -> FusedHeads | None:
        """Every head's first layer in one matrix (``None`` without heads)."""
        return self._saved.heads.fused

    def _unknown(self, name: str) -> UnknownHeadError:
        return UnknownHeadError(
            f"unknown head {name!r}; the bundle has: {', '.join(self._saved.heads.records) or '-'}"
        )

    def labels(self, name: str) -> list[Any]:
        """The labels (classes) head ``name`` answers with, in its output order."""
        fused = self._saved.heads.fused
        if fused is None or name not in fused.specs:
            raise self._unknown(name)
        return list(fused.specs[name].labels)

    def resolve_heads(self, heads: Sequence[str] | str | None) -> list[str]:
        """The head names ``heads`` asks for (all, a list, or ``"a,b"``), checked."""
        return self._resolve(self._saved.heads, heads)

    def _resolve(self, state: HeadSet, heads: Sequence[str] | str | None) -> list[str]:
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
        name, record, info = head_entry(name, head, info, self._saved.trunk, self.limits)
        where = f"head {name!r}"
        with self._lock:
            saved = self._saved
            if data is not None:
                digest = data_hash(data[0], data[1])
                rel = f"{DATA_DIR}/{digest[:24]}.jsonl.gz"
                info |= {"data": rel, "data_hash": digest}
                saved = saved.replace(data={**saved.data, rel: data})
            records = {**saved.heads.records, name: record}
            infos = {**saved.heads.info, name: info}
            self.limits.check_head_count(len(records), where)
            heads = saved.heads.replace(records, infos, {name: head})
            self._saved = saved.with_heads(heads, {name: True})

    def remove_head(self, name: str) -> None:
        with self._lock:
            now = self._saved.heads
            if name not in now.heads:
                raise self._unknown(name)
            records = {k: v for k, v in now.records.items() if k != name}
            infos = {k: v for k, v in now.info.items() if k != name}
            self._saved = self._saved.with_heads(now.replace(records, infos), {name: False})

    def export_head(self, name: str) -> Record:
        """One head as (JSON record, tensors) — the form the bundle stores it in."""
        state = self._saved.heads
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
        name, head, info = head_from_export(name, record, tensors)
        self.add_head(name, head, info=info)

    # -- prediction --------------------------------------------------------

    def predict(
        self,
        texts: Sequence[str],
        heads: Sequence[str] | str | None = None,
        *,
        use_cache: bool = False,
        max_chars: int | None = None,
        scores: Scores = "all",
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
        best five, highest first (``"top"``), the best ``k`` (a count), or none
        (``"none"``: no ``scores`` key). A tree head (``head="tree"``) answers from each
        text's best labels only: ``"all"`` keeps its best five.
        """
        _, fused, names, checked = self._asked(texts, heads, scores)
        answer = self._answering(fused, names, use_cache, max_chars, scores)
        return with_blanks(fused, checked, names, scores, answer)

    def predict_steps(
        self,
        texts: Sequence[str],
        heads: Sequence[str] | str | None = None,
        *,
        max_chars: int | None = None,
        scores: Scores = "all",
    ) -> PredictSteps:
        """:meth:`predict`'s answers, the trunk's work done a step at a time (a caller
        does other work between two): ``steps.step(budget)`` (trunk work, in
        ``trunk.work_unit``) until ``steps.done``, then ``steps.answers()``. See
        :func:`manyheads.bundle.steps.predict_steps`."""
        state, fused, names, checked = self._asked(texts, heads, scores)
        self._check_trunk_fitted()
        whole = self._answering(fused, names, False, max_chars, scores)
        return predict_steps(state, self.trunk, checked, names, max_chars, scores, whole=whole)

    def _asked(
        self, texts: Sequence[str], heads: Sequence[str] | str | None, scores: Scores
    ) -> tuple[HeadSet, FusedHeads, list[str], list[str]]:
        """One snapshot of the head set (for the whole call), its fused heads, the heads
        asked for and the texts, each checked."""
        state = self._saved.heads
        names = self._resolve(state, heads)
        check_scores(scores)
        checked = check_texts(texts)
        assert state.fused is not None
        return state, state.fused, names, checked

    def _answering(
        self,
        fused: FusedHeads,
        names: list[str],
        use_cache: bool,
        max_chars: int | None,
        scores: Scores,
    ) -> Callable[[list[str]], list[dict[str, Any]]]:
        """Answers of texts that hold something, by ``fused``'s heads ``names``."""
        probs = partial(self._probabilities, fused, names=names, use_cache=use_cache)
        return partial(
            answers_of, fused, names=names, probabilities=probs, max_chars=max_chars, scores=scores
        )

    def predict_proba(
        self, texts: Sequence[str], heads: Sequence[str] | str | None = None
    ) -> dict[str, np.ndarray]:
        """``{head: probabilities}`` (texts x outputs; binary heads: ``[1 - p, p]``)."""
        state = self._saved.heads
        names = self._resolve(state, heads)
        assert state.fused is not None
        return self._probabilities(state.fused, check_texts(texts), names=names, use_cache=False)

    def _probabilities(
        self, fused: FusedHeads, texts: list[str], *, names: list[str], use_cache: bool
    ) -> dict[str, np.ndarray]:
        """Every requested head's probabilities from one trunk pass.

        An exported bundle's graph computes the heads it holds; a head added
        since (not yet written into the graph) is applied to the graph's
        embedding here.
        """
        if use_cache:
            X = self.embed(texts, use_cache=True)
            saw(X)
            return fused.probabilities(X, names)
        self._check_trunk_fitted()
        # an int8 export's unsure answers come again from its float graph
        return trunk_probabilities(self.trunk, fused, texts, names)

    # -- the folder --------------------------------------------------------

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
        with self._lock:
            self._saved, self._trunk = save_folder(
                self._saved, folder, self._trunk, overwrite=overwrite
            )
        return folder

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        cache: str | Path | EmbeddingCache | None = _DEFAULT,
        trunk: Trunk | None = None,
        tier: int | None = None,
        limits: HeadLimits | None = None,
        device: DeviceLike = "auto",
    ) -> Self:
        """Load a bundle folder. The trunk is built on first use (or given as ``trunk``).

        ``path`` may also name a built-in bundle (``"content"``), see
        :func:`~manyheads.bundle.bundle_folder`. ``tier``: for a byte bundle, the tier
        (nested embedding size) to answer at; a tier other than the bundle's own loads
        the sub-bundle fitted at that tier (``tiers/<tier>/``). ``limits``: the caps
        on heads added later (a bundle loads whatever its heads hold). ``device``: where
        the trunk runs (``auto``, ``cpu``, ``cuda``, ``cuda:N``; see :class:`Bundle`).
        """
        from .builtin import bundle_folder

        folder = bundle_folder(path, tier)
        bundle = cls.__new__(cls)
        bundle._setup(load_folder(folder), cache, limits, device)
        if trunk is not None:
            given = load_trunk(trunk)
            if given.fingerprint != bundle.trunk_fingerprint:
                raise FingerprintMismatchError(
                    f"the bundle was trained on trunk fingerprint {bundle.trunk_fingerprint}, "
                    f"the trunk given has fingerprint {given.fingerprint}"
                )
            bundle._trunk = given.on_device(bundle._device)
        if tier is not None and bundle.tier != tier:
            raise BundleError(
                f"{folder / BUNDLE_JSON}: expected a bundle at tier {tier}, found {bundle.tier}"
            )
        return bundle

    def training_data(self, name: str) -> KeptData | None:
        """The texts, labels and groups head ``name`` was trained on, if the bundle kept them."""
        with self._lock:
            saved = self._saved
            if name not in saved.heads.info:
                raise self._unknown(name)
            data = read_training_data(saved, name)
            rel = saved.heads.info[name].get("data")
            if data is not None and rel not in saved.data:
                self._saved = saved.replace(data={**saved.data, rel: data})
            return data

    # -- training, evaluation, fine-tuning (handed over when called) -----------

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

    def evaluate(
        self,
        texts: Sequence[str],
        labels: Mapping[str, Sequence[Any]],
        **options: Unpack[EvaluateOptions],
    ) -> dict[str, dict[str, Any]]:
        """Metrics of each head in ``labels`` on these texts (one trunk pass for all):
        ``protocol="holdout"`` scores the heads themselves
        (:func:`manyheads.evaluate.holdout.evaluate_heads`; ``report``: a folder for
        ``report.html`` / ``report.json``); ``"mteb"`` and ``"kfold"`` fit fresh heads
        like them (:mod:`manyheads.evaluate.protocols`, which says the options)."""
        from ..evaluate.run import evaluate_bundle

        return evaluate_bundle(self, texts, labels, **options)

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
        return f"Bundle(trunk={self.trunk_name!r}, heads={list(self._saved.heads.heads)})"
