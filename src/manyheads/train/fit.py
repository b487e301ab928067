"""Fitting one head of a bundle on its cached embeddings (``Bundle.fit_head``).

Everything a head is asked to be (name, kind, head type, labels, groups, caps, its
hyper-parameters) is checked before any text reaches the trunk, so a mistake costs
no pass over the texts.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import numpy as np
import scipy.sparse as sp

from ..data import check_groups, data_hash, split_indices
from ..errors import ConfigError, DataError
from ..evaluate.holdout import head_scores, known_only
from ..heads import check_head_name, check_kind, check_labels
from ..heads.head_types import candidate_types
from ..heads.head_types import head_type as stored_type
from ..heads.kinds import distinct_labels, kind_of
from ..heads.linear import LinearHead
from ..heads.tree import tree_count
from ..learn.drift import head_reference
from ..learn.inputs import input_profile
from ..trunks.base import check_texts, dense_rows, stack_rows
from .parts import choose_multipliers, column_scale, fold_columns, scale_columns
from .settings import FitSettings, HeadSummary
from .zero_shot import made_from, made_info, prior_of

if TYPE_CHECKING:
    from ..heads import AnyHead
    from ..heads.record import HeadLimits
    from ..trunks import Features, TrunkBase

__all__ = ["FitOptions", "FitTarget", "HeadSummary", "fit_head", "split"]


class FitTarget(Protocol):
    """What fitting a head needs of the bundle it goes into (a ``Bundle``)."""

    limits: HeadLimits

    @property
    def heads(self) -> Mapping[str, Any]: ...

    @property
    def head_info(self) -> Mapping[str, Any]: ...

    @property
    def trunk_needs_fit(self) -> bool: ...

    @property
    def trunk_fingerprint(self) -> str: ...

    @property
    def trunk(self) -> TrunkBase: ...

    def fit_trunk(self, texts: Sequence[str]) -> None: ...

    def embed(
        self, texts: Sequence[str], *, use_cache: bool = True, progress: bool = False
    ) -> Features: ...

    def add_head(
        self,
        name: str,
        head: AnyHead,
        *,
        info: dict[str, Any] | None = None,
        data: tuple[list[str], list[Any], list[Any] | None] | None = None,
    ) -> None: ...


class FitOptions(TypedDict, total=False):
    """The options of :func:`fit_head` (and ``Bundle.fit_head``), by name."""

    groups: Sequence[Any] | None
    val_texts: Sequence[str] | None
    val_labels: Sequence[Any] | None
    val_fraction: float
    refit: bool | None
    field: str | None
    C: float | str
    class_weight: str | dict[Any, float] | None
    head: str
    thresholds: str
    keep_data: bool
    seed: int
    progress: bool
    path_sep: str
    part_weights: str
    beam: int
    precision: str
    trees: int | str
    soft_targets: tuple[Sequence[Any], Any] | None
    settings: FitSettings | None


def new_head(head_type: str, kind: str, settings: FitSettings) -> AnyHead:
    """An unfitted head of the stored type ``head_type`` (``linear``, ``mlp``, any
    registered one) with ``settings``."""
    model: AnyHead = stored_type(head_type).new(kind, settings)
    model.check_params()
    return model


def split(
    kind: str, labels: list[Any], groups: Sequence[Any] | None, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Train / held-out row indices: grouped when ``groups`` are given, else stratified
    by label (multilabel: not stratified)."""
    return split_indices(
        len(labels),
        stratify=kind_of(kind).strata(labels),
        groups=groups,
        val_fraction=fraction,
        seed=seed,
    )


def _part_scale(
    trunk: TrunkBase,
    make: Any,
    X: Any,
    y: list[Any],
    X_val: Any,
    y_val: list[Any],
    soft: tuple[list[Any], np.ndarray] | None = None,
) -> tuple[np.ndarray | None, LinearHead | None, dict[str, Any] | None]:
    """``(column scale, head, report)`` for ``part_weights="auto"``: the multipliers
    chosen on the validation split at the C a head on the trunk's own vectors chooses.
    The scale is ``None`` when every multiplier stays 1; the head is then that first
    head, fitted and calibrated (``None`` otherwise)."""
    dims = [int(p.dim) for p in trunk.parts]
    if len(dims) < 2:
        return None, None, None
    first: LinearHead = make("linear")
    first.fit(X, y, X_val=X_val, y_val=y_val, soft_target=soft)

    def loss(multipliers: np.ndarray) -> np.ndarray:
        if (multipliers == 1).all():
            return first.validation_losses(X_val, y_val)
        col = column_scale(dims, trunk.part_weights, multipliers)
        probe: LinearHead = make("linear")
        probe.set_params(C=first.C_)
        probe.fit(scale_columns(X, col), y, soft_target=soft)
        return probe.validation_losses(scale_columns(X_val, col), y_val)

    multipliers, tried = choose_multipliers(loss, len(dims))
    report = {
        "parts": [p.name for p in trunk.parts],
        "multipliers": [float(m) for m in multipliers],
        "C": float(first.C_),
        "tried": tried,
    }
    if (multipliers == 1).all():
        return None, first, report
    return column_scale(dims, trunk.part_weights, multipliers), None, report


def _recipe(s: FitSettings, model: Any, rows: int) -> dict[str, Any]:
    """How the head was fitted, as an update fits it again: the settings that shape it
    (``C``: a number, or ``"auto"``, searched again on the new rows; ``C_chosen``: the
    value the search chose, on ``C_rows`` rows)."""
    recipe: dict[str, Any] = {
        "C": s.C if isinstance(s.C, str) else float(s.C),
        "thresholds": s.thresholds,
        "part_weights": s.part_weights,
        "val_fraction": s.val_fraction,
        "refit": s.refit,
    }
    chosen = getattr(model, "C_", None)
    if isinstance(chosen, int | float):
        recipe["C_chosen"] = float(chosen)
        recipe["C_rows"] = rows
    if s.class_weight is None or isinstance(s.class_weight, str):
        recipe["class_weight"] = s.class_weight
    return recipe


def fit_head(
    bundle: FitTarget,
    name: str,
    texts: Sequence[str],
    labels: Sequence[Any],
    kind: str = "multiclass",
    *,
    groups: Sequence[Any] | None = None,
    val_texts: Sequence[str] | None = None,
    val_labels: Sequence[Any] | None = None,
    soft_targets: tuple[Sequence[Any], Any] | None = None,
    settings: FitSettings | None = None,
    **options: Any,
) -> HeadSummary:
    """Train (or replace) head ``name`` of ``bundle`` on ``texts`` / ``labels``.

    How: ``settings`` (a :class:`~manyheads.train.settings.FitSettings`), with
    ``options`` (its fields, by name) over it; every one is checked before anything
    else is done:

    ``head``: ``"linear"`` (default; fused into the bundle's one matrix
    product), ``"mlp"`` (one hidden layer, dropout, early stopping on the
    validation split; needs torch to train, not to predict), ``"tree"`` (a label
    tree searched by beam, for 10^4 to 10^6 labels: :mod:`~manyheads.heads.tree`;
    ``beam``: inner nodes a search keeps per level, ``precision``: its weights in
    ``"float16"``, ``"int8"`` or ``"int4"``, ``trees``: trees whose probabilities it
    averages, each grown from another seed: more accurate, each costing its memory and
    search again; ``"auto"``, two up to 100,000 labels and one above), or ``"auto"``
    (up to ``EXTREME_LABELS`` labels the linear and MLP heads, keeping the one with the
    better validation accuracy; above, a tree). A tree head is refitted on every row
    after its validation metrics (precision / recall / nDCG at 1, 3, 5) unless
    ``refit=False``.
    ``thresholds``: what binary / multilabel thresholds maximise on the
    validation split, ``"f1"`` (default) or ``"accuracy"``.

    ``part_weights``: on a composite trunk (``minilm+tfidf``, ``fast``), ``"fixed"``
    (default) uses the trunk's part weights; ``"auto"`` lets a linear head choose a
    multiplier for each part on its validation split, folded into its coefficients
    (:mod:`~manyheads.train.parts`; ``metrics["part_weights"]``).

    ``kind="hierarchical"``: each label is a path (``"role::program"``; parts
    separated by ``path_sep``), one or several per text; the head answers every
    node of the paths it finds, never a node without its parent (see
    :func:`~manyheads.heads.decode.decide`).

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
    ``refit=None`` (default) refits multiclass heads only: their argmax
    decisions gain from the extra rows, while binary / multilabel decisions
    rest on thresholds tuned for the train-part model's confidence, which a
    refit shifts (measured in bench/RESULTS.md).

    ``soft_targets=(label_names, P)``: a linear head learns from probabilities (``P``,
    one row per text, one column per name; a teacher's answers, see
    :mod:`manyheads.absorb`) instead of ``labels``, which still name the classes and
    are what calibration and the metrics are measured against. Such a head is not
    refitted unless ``refit`` says so.
    """
    s = FitSettings.merged(settings, options, "fit_head")
    name = check_head_name(name)
    head_kind = check_kind(kind)
    kind = head_kind
    head = s.head
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
    head_kind.check_paths(  # every label path read before any trunk call
        [*labels, *(val_labels or [])], s.path_sep, lambda i: f"head {name!r}: label #{i}: "
    )
    if groups is not None:
        groups = check_groups(groups, len(texts), f"head {name!r}")
    if val_texts is not None and (val_labels is None or len(val_labels) != len(val_texts)):
        raise DataError("val_texts and val_labels must be given together, same length")
    distinct = distinct_labels(kind, labels)
    candidates = candidate_types(head, len(distinct))
    types = [stored_type(c) for c in candidates]
    extreme = any(t.extreme for t in types)
    soft = None
    if soft_targets is not None:
        if not all(t.learns_soft_targets for t in types):
            raise ConfigError(f"head {name!r}: soft targets train linear heads, not {head!r}")
        soft_names, soft = list(soft_targets[0]), np.asarray(soft_targets[1], dtype=np.float32)
        if soft.ndim != 2 or soft.shape[0] != len(texts):
            raise DataError(
                f"head {name!r}: soft targets must have one row per text ({len(texts)}), "
                f"got shape {soft.shape}"
            )

    # a head made from label names learns with their weights as its prior
    prior = prior_of(bundle, name)
    if prior is not None and prior.kind != kind:
        prior = None
    made = made_from(bundle.head_info[name]) if prior is not None else None

    def make(head_type: str) -> AnyHead:
        model = new_head(head_type, kind, s)
        if prior is not None and isinstance(model, LinearHead):
            model.set_params(prior=prior)
        return model

    for head_type in candidates:  # the settings are checked now, not after the embedding
        make(head_type)
    # caps before any trunk call: a mistake costs no pass over the texts
    bundle.limits.check_labels(distinct, f"head {name!r}", extreme=extreme)
    if extreme:
        bundle.limits.check_tree(
            len(distinct),
            bundle.trunk.dim,
            s.precision,
            f"head {name!r}",
            trees=tree_count(s.trees, len(distinct)),
        )
    if name not in bundle.heads:
        bundle.limits.check_head_count(len(bundle.heads) + 1, f"head {name!r}")
    if bundle.trunk_needs_fit:
        bundle.fit_trunk(texts)
    t0 = time.perf_counter()
    X_all = bundle.embed(
        texts + (list(val_texts) if val_texts is not None else []), progress=s.progress
    )
    embed_seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    X_trunk = X_all  # the trunk's own vectors, for the inputs' reference
    if val_texts is not None:
        X, X_val = X_all[: len(texts)], X_all[len(texts) :]
        y, y_val = labels, list(val_labels or [])
        train_idx = np.arange(len(texts))
    else:
        if s.val_fraction > 0:
            train_idx, val_idx = split(kind, labels, groups, s.val_fraction, s.seed)
        else:
            train_idx, val_idx = np.arange(len(texts)), np.arange(0)
        X, X_val = X_all[train_idx], X_all[val_idx]
        y = [labels[i] for i in train_idx]
        y_val = [labels[i] for i in val_idx]
    soft_fit = None if soft is None else (soft_names, soft[train_idx])
    labels_all = labels + list(y_val) if val_texts is not None else labels
    if extreme and sp.issparse(X_all):
        raise ConfigError(
            f"head {name!r}: a tree head learns from dense vectors; this trunk gives sparse ones"
        )
    try:
        if not all(t.takes_sparse for t in types) and sp.issparse(X):  # MLP: dense input
            X, X_val, X_all = dense_rows(X), dense_rows(X_val), dense_rows(X_all)
        scale, prefit, chosen = None, None, None
        if s.part_weights == "auto" and all(t.weighs_parts for t in types) and y_val:
            scale, prefit, chosen = _part_scale(bundle.trunk, make, X, y, X_val, y_val, soft_fit)
            if scale is not None:
                X, X_val, X_all = (scale_columns(m, scale) for m in (X, X_val, X_all))
        fitted: list[tuple[Any, ...]] = []
        for head_type in candidates:
            model: AnyHead
            if prefit is not None and stored_type(head_type).weighs_parts:
                model = prefit
            else:
                model = make(head_type)
                extra: dict[str, Any] = {} if soft_fit is None else {"soft_target": soft_fit}
                model.fit(X, y, X_val=X_val if y_val else None, y_val=y_val or None, **extra)
            Xv, yv = known_only(model, X_val, y_val) if y_val else (X_val, y_val)
            found = head_scores(model, Xv, yv) if len(yv) else {"n": 0}
            fitted.append((found.get("accuracy", 0.0), -len(fitted), model, found, Xv, yv))
        # best validation accuracy; ties go to the earlier (linear) candidate
        _, at, model, best_metrics, X_val, y_val = max(fitted, key=lambda f: (f[0], f[1]))
        chosen_type = candidates[-at]
        metrics = dict(best_metrics)
        if head == "auto":
            metrics["head_choice"] = {
                type_: round(float(f[0]), 6) for type_, f in zip(candidates, fitted, strict=True)
            }
        if len(y_val) and model.temperature_ != 1.0:
            temperature, model.temperature_ = model.temperature_, 1.0
            metrics["ece_uncalibrated"] = head_scores(model, X_val, y_val)["ece"]
            model.temperature_ = temperature
        # drift's reference: answers to rows the head was not fitted on (else its own)
        if val_texts is not None:
            reference = head_reference(model, X_all[len(texts) :])
        else:
            rows = val_idx if len(val_idx) else train_idx[:5000]
            ref_groups = None if groups is None else [groups[i] for i in rows]
            reference = head_reference(model, X_all[rows], ref_groups)
        refit = s.refit
        if refit is None:  # default: multiclass heads only (see the docstring)
            refit = head_kind.exclusive and soft is None
        if extreme and refit is not False and X_all.shape[0] > X.shape[0]:
            # a tree head learns every label, those of the validation rows too (X_all:
            # every row given, validation rows included, even those of unseen labels)
            chosen_on_val = model.threshold_, model.route_
            model.fit(X_all, labels_all)
            model.threshold_, model.route_ = chosen_on_val
        if refit and len(y_val) and isinstance(model, LinearHead):
            X_fit = stack_rows(X, X_val) if val_texts is not None else X_all
            y_fit = list(y) + list(y_val) if val_texts is not None else labels
            soft_all = None if soft is None or val_texts is not None else (soft_names, soft)
            model.refit_keeping_calibration(X_fit, y_fit, soft_target=soft_all)
            if head_kind.exclusive and soft is None:
                fit_groups = None if groups is None else [f"g{g!r}" for g in groups]
                if fit_groups is not None and val_texts is not None:
                    fit_groups += [f"v{i}" for i in range(len(y_val))]
                cv = model.crossfit_temperature(X_fit, y_fit, groups=fit_groups, seed=s.seed)
                if "proba" in cv:  # every row answered by a model that did not see it
                    rows = cv["proba_rows"]
                    at = None if fit_groups is None else [fit_groups[i] for i in rows]
                    reference = head_reference(model, None, at, proba=cv["proba"])
                metrics["temperature"] = cv["temperature"]
                if "ece_cv" in cv:
                    metrics["ece_cv"] = cv["ece_cv"]
    except DataError as exc:
        raise DataError(f"head {name!r}: {exc}") from exc
    if chosen is not None:
        metrics["part_weights"] = chosen
    if scale is not None and isinstance(model, LinearHead):
        model.coef_ = fold_columns(model.coef_, scale)  # the trunk's own vectors from now on
    seconds = time.perf_counter() - t1
    # the kept data is every row given, validation rows included
    kept_texts, kept_labels, kept_groups = texts, labels, groups
    if val_texts is not None:
        kept_texts = texts + list(val_texts)
        kept_labels = labels + list(val_labels or [])
        if groups is not None:
            kept_groups = list(groups) + [f"validation-{i}" for i in range(len(val_texts))]
    inputs = input_profile(X_trunk, bundle.trunk.meaning_columns, kept_groups, s.seed)
    if inputs is not None:
        reference["inputs"] = inputs
    info = {
        "kind": kind,
        "field": s.field or name,
        "trunk_fingerprint": bundle.trunk_fingerprint,
        "metrics": metrics,
        "n_train": len(train_idx),
        "n_val": int(metrics.get("n", 0)),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "head_type": chosen_type,
        "reference": reference,
        "fit": _recipe(s, model, len(kept_texts)),
    }
    if made is not None and isinstance(model, LinearHead):
        info |= made_info(*made, len(kept_texts))
    data = None
    if s.keep_data:  # add_head names the kept rows by their hash
        data = (kept_texts, kept_labels, None if kept_groups is None else list(kept_groups))
    else:
        info["data_hash"] = data_hash(kept_texts, kept_labels)
    bundle.add_head(name, model, info=info, data=data)
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


SEARCH_AGAIN = 1.25  # rows grown by this factor since C was searched: search it again
WALK_TOL = 10.0  # fits that only choose C, or are only judged, stop at this x the tolerance


def _kept_scale(trunk: TrunkBase, info: Mapping[str, Any]) -> np.ndarray | None:
    """The column scale of the part weights a head chose (``part_weights="auto"``),
    folded into its coefficients; None when it chose none."""
    chosen = (info.get("metrics") or {}).get("part_weights")
    multipliers = chosen.get("multipliers") if isinstance(chosen, Mapping) else None
    dims = [int(p.dim) for p in trunk.parts]
    if not isinstance(multipliers, list) or len(multipliers) != len(dims):
        return None
    return column_scale(dims, trunk.part_weights, np.asarray(multipliers, dtype=np.float64))


def refit_head(
    bundle: FitTarget,
    name: str,
    texts: Sequence[str],
    labels: Sequence[Any],
    *,
    groups: Sequence[Any] | None = None,
    seed: int = 0,
    features: Any = None,
    search: bool = True,
    candidate: bool = False,
) -> HeadSummary | None:
    """Fit linear head ``name`` of ``bundle`` again on ``texts`` / ``labels`` (all its
    rows, the kept and the new), starting from its weights, with its part weights kept.
    A head whose C was searched (``C="auto"``), once its rows have grown by a quarter
    (``SEARCH_AGAIN``) since C was last searched or a label it did not know comes,
    walks C from the value it has on a validation split (``groups`` as in
    :func:`fit_head`; the same share as its first fit), its temperature and
    thresholds fitted there again, then is fitted on all rows; otherwise (with a fixed
    C, and with ``search`` false) it keeps its C, temperature and thresholds. A label it did
    not know grows it by one output, starting at zero weights (a binary or multilabel
    threshold of 0.5). Every fit starts from the last one's weights; those of a walk
    stop at a gradient ``WALK_TOL`` times the head's tolerance (they only choose C: the
    fit on all rows then goes on from the chosen one to the head's own tolerance). The
    temperature is not cross-fitted: what an update does by default, in a fraction of
    :func:`fit_head`'s time. ``features``: the trunk's vectors of
    ``texts`` when the caller has them. When C is walked, the answers of the model
    fitted without the validation split to it become the head's drift reference
    (otherwise the reference is kept). The inputs' reference is measured again on all
    the rows. ``candidate``: a head fitted only to be judged, a fit on every row to
    follow (as a guarded update does): its fit on all rows stops at ``WALK_TOL`` times
    the tolerance too, and it keeps the old inputs' reference. None, and
    nothing changed, for a head that is not linear (an MLP head is fitted again by
    :func:`fit_head` and its recipe)."""
    old = bundle.heads[name]
    if not isinstance(old, LinearHead):
        return None
    info = dict(bundle.head_info[name])
    head_kind = old.head_kind
    texts = check_texts(texts)
    labels = list(labels)
    if len(texts) != len(labels) or not texts:
        raise DataError(f"head {name!r}: {len(texts)} texts but {len(labels)} labels")
    check_labels(name, head_kind, labels)
    head_kind.check_paths(labels, old.path_sep, lambda i: f"head {name!r}: label #{i}: ")
    bundle.limits.check_labels(distinct_labels(head_kind, labels), f"head {name!r}")
    t0 = time.perf_counter()
    X = bundle.embed(texts) if features is None else features
    X_trunk = X  # the trunk's own vectors, for the inputs' reference
    embed_seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    model = copy.deepcopy(old)
    prior = prior_of(bundle, name)
    made = made_from(info) if prior is not None else None
    if prior is not None and made is not None:
        model.set_params(prior=prior)
        info |= made_info(*made, len(texts))
    scale = _kept_scale(bundle.trunk, info)
    if scale is not None:  # fit where the head chose its C: on the scaled vectors
        X = scale_columns(X, scale)
        unfolded = np.divide(model.coef_, scale, out=np.zeros_like(model.coef_), where=scale > 0)
        model.coef_ = unfolded.astype(model.coef_.dtype)
    try:
        kept_recipe = info.get("fit")
        recipe: Mapping[str, Any] = kept_recipe if isinstance(kept_recipe, Mapping) else {}
        fraction = float(recipe.get("val_fraction") or 0)
        searched = recipe.get("C_rows")
        grown = not isinstance(searched, int) or len(texts) >= SEARCH_AGAIN * searched
        learnt = set(distinct_labels(head_kind, labels)) - set(old.classes_.tolist())
        walked = search and model.C == "auto" and fraction > 0 and (grown or bool(learnt))
        loose = WALK_TOL * float(old.tol)
        if walked:  # C walked from its value, calibrated again
            train_idx, val_idx = split(head_kind, labels, groups, fraction, seed)
            if len(val_idx):
                # the walk's fits only choose C: a looser tolerance (restored below)
                model.set_params(warm_start=True, tol=loose)
                model.fit(
                    X[train_idx],
                    [labels[i] for i in train_idx],
                    X_val=X[val_idx],
                    y_val=[labels[i] for i in val_idx],
                )
                at = None if groups is None else [groups[i] for i in val_idx]
                info["reference"] = head_reference(model, X[val_idx], at)
        model.set_params(tol=loose if candidate else old.tol)
        model.refit_keeping_calibration(X, labels)
        model.set_params(tol=old.tol)
    except DataError as exc:
        raise DataError(f"head {name!r}: {exc}") from exc
    if scale is not None:
        model.coef_ = fold_columns(model.coef_, scale)
    info.pop("data", None)
    if walked:
        info["fit"] = {**info["fit"], "C_chosen": float(model.C_), "C_rows": len(texts)}
    reference = info.get("reference")
    if isinstance(reference, Mapping):  # the texts it learnt from, the new ones among them
        before = bundle.head_info[name].get("reference")
        profile = before.get("inputs") if isinstance(before, Mapping) else None
        if not candidate:
            profile = input_profile(X_trunk, bundle.trunk.meaning_columns, groups, seed)
        reference = {k: v for k, v in reference.items() if k != "inputs"}
        info["reference"] = reference if profile is None else {**reference, "inputs": profile}
    # a candidate is judged, then fitted again or let go: its rows are not hashed
    info["data_hash"] = None if candidate else data_hash(texts, labels)
    info |= {
        "n_train": len(texts),
        "refit": {
            "how": "warm",
            "rows": len(texts),
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    }
    bundle.add_head(name, model, info=info)
    return HeadSummary(
        name=name,
        kind=old.kind,
        n_classes=len(model.classes_),
        n_train=len(texts),
        n_val=0,
        metrics=dict(info.get("metrics") or {}),
        seconds=time.perf_counter() - t1,
        embed_seconds=embed_seconds,
    )
