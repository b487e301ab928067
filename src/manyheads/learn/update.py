"""Guarded updates: refit a head from its kept training data and its corrections, and
promote the new head only when it is not worse than the one it would replace.

For each head asked (all by default) with at least ``min_feedback`` corrections no
update has judged yet:

1. Its pending corrections (those not yet in its kept data) are split by their id into
   a held-back share (``held_back``, default 20%: every correction whose seeded hash
   falls there) and the rest.
2. A candidate is fitted on a copy of the bundle from the kept rows plus the rest of
   the corrections. A linear head is fitted again from its own weights
   (:func:`~manyheads.train.fit.refit_head`): a label it did not know grows it by one
   output; a C that was searched is walked from its value on a validation split once
   the rows have grown by a quarter since it was searched or a new label comes, else
   kept with the temperature and thresholds. With ``full`` (and for an MLP head) it is fitted
   exactly as ``fit_head`` fitted it, by its recipe kept in its info (head type,
   field, seed, thresholds' objective, part weights, validation share, refit, class
   weights and C, a searched C searched again from 1, the temperature cross-fitted):
   several times slower, the same accuracy on the stream of ``bench/stream.py``.
   Texts come from the embedding cache, so only new texts pay a trunk pass (one for
   every text an update needs), and the vectors an update read stay in memory for the
   next update in the same process (up to ``KEEP_VECTORS_BYTES``): a head's kept rows
   are read once, not at every update. The fits of a C walk, and a candidate that
   step 5 fits again on every row, stop at ten times the head's gradient tolerance
   (``WALK_TOL``); its inputs' reference is measured only once it is promoted.
3. Old and candidate are scored row by row on two sets: the held-back corrections (the
   traffic now; neither head saw them) and up to ``max_old_rows`` of the kept rows
   (the traffic the head was trained on; both saw them). A row scores 1 or 0 for a
   single-label head (a label the head does not know counts as wrong) and the Jaccard
   overlap of the label sets for a multilabel or hierarchical one.
4. **The rule.** On each set the paired difference ``d = new - old`` has a mean and a
   standard error ``se = std(d) / sqrt(n)`` (its noise). The held-back corrections are
   the honest test (neither head saw them; random wrong labels among them lower both
   heads alike, so they do not tilt the comparison): the candidate must not be worse
   there, ``mean(d) >= -margin * se`` (``margin`` default 2: a loss smaller than twice
   its noise is not evidence of a loss). Both heads were fitted on the kept rows, and
   the old one was fitted on nothing else, so it looks better on them than it is;
   there the candidate may lose up to ``forget`` (0.05) beyond the noise, which keeps
   a head that corrections would make forget what it knew (corrections that all name
   one class, say) and lets one through that traded a little in-sample fit for the
   traffic now. With no held-back corrections the kept rows decide alone, at
   ``margin``; with no rows at all nothing is promoted.
5. A promoted linear head then learns the held-back corrections too: the candidate
   judged is fitted again, from its weights, on every row (its C, temperature and
   thresholds kept; a label only the held-back rows have grows it by one output), as a
   model chosen on held-out rows is refitted on all of them. A correction thus helps
   the very next answers, not those after the next update (on the stream of
   ``bench/stream.py`` this is what lets an update learn a new language as soon as a
   retrain does). It is saved with the next generation, its predecessor kept in its
   history, and its kept training data holds every correction. A kept head records
   that its corrections were judged, so they count again only with new ones.

The report says per head: rows used, the scores before and after on each set,
promoted or kept, and why.
"""

from __future__ import annotations

import hashlib
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..evaluate.holdout import outcome
from ..heads.head_types import HEAD_TYPE_REGISTRY
from ..trunks.base import check_texts, stack_rows

__all__ = ["HeadUpdate", "UpdateReport", "UpdateSettings", "update_heads"]


@dataclass(frozen=True)
class UpdateSettings:
    """How heads are updated (checked on creation)."""

    min_feedback: int = 1  # new corrections a head needs before it is refitted
    held_back: float = 0.2  # share of corrections held back to judge old against new
    max_old_rows: int = 2000  # kept training rows the two heads are also judged on
    margin: float = 2.0  # standard errors of the paired difference a loss may be
    forget: float = 0.05  # what the new head may lose on the kept rows, beyond the noise
    keep: int = 5  # earlier generations a head keeps
    seed: int = 0
    dry_run: bool = False  # judge, report, change nothing
    full: bool = False  # fit by the head's whole recipe (C searched, temperature cross-fitted)

    def __post_init__(self) -> None:
        for name in ("min_feedback", "max_old_rows", "keep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.held_back, float | int) or not 0 < self.held_back < 1:
            raise ConfigError(f"held_back must be between 0 and 1, got {self.held_back!r}")
        if not isinstance(self.margin, float | int) or not self.margin >= 0:
            raise ConfigError(f"margin must be >= 0, got {self.margin!r}")
        if not isinstance(self.forget, float | int) or not 0 <= self.forget <= 1:
            raise ConfigError(f"forget must be between 0 and 1, got {self.forget!r}")
        for name in ("dry_run", "full"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class Judged:
    """Old and new on one set of rows: mean scores and the paired per-row differences."""

    n: int = 0
    before: float | None = None
    after: float | None = None
    d: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _mean_se(d: np.ndarray) -> tuple[float, float]:
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    return float(d.mean()), se


def _verdict(fb: Judged, old: Judged, s: UpdateSettings) -> tuple[bool, str]:
    """Whether the candidate is promoted (the rule of the module docstring), and the
    verdict in words."""
    if not fb.n and not old.n:
        return False, "no rows to judge the new head on (no held-back corrections, no kept rows)"
    parts = []
    ok = True
    if fb.n:
        mean, se = _mean_se(fb.d)
        held = mean >= -s.margin * se
        ok &= held
        parts.append(
            f"{fb.before:.3f} -> {fb.after:.3f} on {fb.n} held-back corrections (noise {se:.3f})"
        )
    if old.n:
        mean, se = _mean_se(old.d)
        # kept rows: seen by both heads, so only a loss beyond `forget` counts (with no
        # held-back corrections, any loss beyond the noise)
        allowed = s.margin * se + (s.forget if fb.n else 0.0)
        ok &= mean >= -allowed
        parts.append(f"{old.before:.3f} -> {old.after:.3f} on {old.n} kept rows (noise {se:.3f})")
    verdict = "not worse" if ok else "worse"
    return ok, f"{verdict}: " + "; ".join(parts)


@dataclass(frozen=True)
class HeadUpdate:
    """What an update did to one head."""

    head: str
    promoted: bool
    reason: str
    generation: int
    rows_kept: int = 0
    rows_feedback: int = 0
    rows_held_back: int = 0
    rows_old: int = 0
    before: float | None = None  # on the held-back corrections
    after: float | None = None
    before_old: float | None = None  # on kept training rows
    after_old: float | None = None
    fit: str = ""  # "warm" (from the head's weights) or "recipe" (its whole recipe)
    seconds: float = 0.0


@dataclass(frozen=True)
class UpdateReport:
    """Per head asked, what the update did (:class:`HeadUpdate`)."""

    heads: list[HeadUpdate] = field(default_factory=list)
    dry_run: bool = False

    @property
    def promoted(self) -> list[str]:
        return [h.head for h in self.heads if h.promoted]

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "heads": [asdict(h) for h in self.heads]}


def _held(row_id: int, seed: int, share: float) -> bool:
    digest = hashlib.sha256(f"{seed}:{row_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64 < share


def _row_scores(head: Any, X: Any, labels: Sequence[Any]) -> np.ndarray:
    """1/0 per row for a single-label head, the Jaccard overlap for a set of labels."""
    found = outcome(head, X, list(labels), unseen=True)
    if found.kind.is_set:
        t, p = np.asarray(found.target) > 0, np.asarray(found.picked) > 0
        union = (t | p).sum(axis=1)
        return np.where(union == 0, 1.0, (t & p).sum(axis=1) / np.maximum(union, 1))
    return (np.asarray(found.picked) == np.asarray(found.target)).astype(np.float64)


def _judge(old: Any, new: Any, X: Any, labels: Sequence[Any]) -> Judged:
    if not len(labels):
        return Judged()
    a, b = _row_scores(old, X, labels), _row_scores(new, X, labels)
    return Judged(len(a), float(a.mean()), float(b.mean()), b - a)


_RECIPE = ("C", "thresholds", "part_weights", "val_fraction", "refit", "class_weight")


def _fit_options(info: Mapping[str, Any], head: Any, settings: UpdateSettings) -> dict[str, Any]:
    """The head's own recipe (``info["fit"]``, kept by ``fit_head``: its C, thresholds'
    objective, part weights, validation share, refit, class weights) and the settings
    its type keeps in its record (a tree head's beam, precision and trees)."""
    found = info.get("fit")
    recipe: Mapping[str, Any] = found if isinstance(found, dict) else {}
    options: dict[str, Any] = {k: recipe[k] for k in _RECIPE if k in recipe}
    options.update(
        head=str(info.get("head_type") or "linear"),
        field=info.get("field"),
        seed=settings.seed,
    )
    if getattr(head, "path_sep", None):
        options["path_sep"] = head.path_sep
    if options["head"] in HEAD_TYPE_REGISTRY:  # e.g. a tree head's beam and precision
        options.update(HEAD_TYPE_REGISTRY[options["head"]].kept_settings(head))
    return options


def _rows_of(kept: Any, rows: Sequence[Any], name: str) -> tuple[list, list, list | None]:
    texts, labels, groups = kept if kept is not None else ([], [], None)
    texts = check_texts(list(texts) + [r.text for r in rows])  # once for every fit
    labels = list(labels) + [r.labels[name] for r in rows]
    if groups is not None:
        groups = list(groups) + [f"feedback-{r.id}" for r in rows]
    return texts, labels, groups


class _Vectors:
    """The trunk's vectors of texts, each text encoded once for all the heads an update
    fits (one pass, or the cache's rows, for every text: a trunk that is not cached,
    such as ``static``, would otherwise encode a head's kept rows once per head), and
    kept for the next update in this process (:func:`_vectors_of`): a head's kept rows
    are then encoded once in the life of the process, not once per update."""

    def __init__(self, token: tuple[Any, ...]) -> None:
        self.token = token  # what the vectors depend on: trunk fingerprint, cache's dtype
        self.matrix: Any = None  # every text's vector so far (dense, or CSR)
        self.row: dict[str, int] = {}
        self.lock = threading.Lock()

    def of(self, bundle: Any, texts: Sequence[str]) -> Any:
        with self.lock:
            return self._of(bundle, texts)

    def _of(self, bundle: Any, texts: Sequence[str]) -> Any:
        todo = list(dict.fromkeys(t for t in texts if t not in self.row))
        if todo:
            block = bundle.embed(todo)
            start = 0 if self.matrix is None else self.matrix.shape[0]
            self.matrix = block if self.matrix is None else stack_rows(self.matrix, block)
            self.row.update((t, start + i) for i, t in enumerate(todo))
        return self.matrix[[self.row[t] for t in texts]]

    @property
    def nbytes(self) -> int:
        m = self.matrix
        if m is None:
            return 0
        return int(m.nbytes if isinstance(m, np.ndarray) else m.data.nbytes + m.indices.nbytes)


# the vectors updates have read, per trunk object (a bundle's copies share it), so the
# next update encodes only texts it has not seen; dropped with the trunk, and when they
# outgrow KEEP_VECTORS_BYTES
_KEPT: weakref.WeakKeyDictionary[Any, _Vectors] = weakref.WeakKeyDictionary()
_KEPT_LOCK = threading.Lock()
KEEP_VECTORS_BYTES = 512 * 2**20


def _vectors_of(bundle: Any) -> _Vectors:
    """The vectors kept for ``bundle``'s trunk (new when its fingerprint or the cache's
    storage type changed: the vectors would differ)."""
    cache = bundle.cache
    token = (bundle.trunk.fingerprint, None if cache is None else cache.dtype)
    with _KEPT_LOCK:
        found = _KEPT.get(bundle.trunk)
        if found is None or found.token != token:
            found = _KEPT[bundle.trunk] = _Vectors(token)
        return found


def _let_go(trunk: Any, vectors: _Vectors) -> None:
    if vectors.nbytes > KEEP_VECTORS_BYTES:
        with _KEPT_LOCK:
            if _KEPT.get(trunk) is vectors:
                del _KEPT[trunk]


def _update_one(
    bundle: Any, name: str, rows: Sequence[Any], s: UpdateSettings, vectors: _Vectors
) -> HeadUpdate:
    t0 = time.perf_counter()
    info = bundle.head_info[name]
    marks = dict(info.get("feedback") or {})
    through, tried = int(marks.get("through", 0)), int(marks.get("tried", 0))
    pending = [r for r in rows if name in r.labels and r.id > through]
    new = sum(r.id > tried for r in pending)
    generation = int(info.get("generation", 1))
    if new < s.min_feedback:
        return HeadUpdate(
            name,
            False,
            f"{new} new corrections; an update needs {s.min_feedback} (min_feedback)",
            generation,
        )
    kept = bundle.training_data(name)
    held = [r for r in pending if _held(r.id, s.seed, s.held_back)]
    rest = [r for r in pending if not _held(r.id, s.seed, s.held_back)]
    old = bundle.heads[name]
    texts, labels, groups = _rows_of(kept, rest, name)
    n_kept = 0 if kept is None else len(kept[0])
    pick = np.random.default_rng(s.seed).permutation(n_kept)[: s.max_old_rows]
    # the rows to fit (the kept ones first), then the held-back corrections
    X = vectors.of(bundle, texts + [r.text for r in held])
    held_rows = np.arange(len(texts), len(texts) + len(held))
    candidate = bundle.copy()
    fit = "warm"
    if s.full or (
        candidate.refit_head(
            name,
            texts,
            labels,
            groups=groups,
            seed=s.seed,
            features=X[: len(texts)],
            candidate=bool(held),  # judged, then fitted on every row: see below
        )
        is None
    ):
        fit = "recipe"
        options = _fit_options(info, old, s)
        kind = str(info.get("kind"))
        candidate.fit_head(name, texts, labels, kind, groups=groups, keep_data=False, **options)
    new_head = candidate.heads[name]
    on_feedback = (
        _judge(old, new_head, X[held_rows], [r.labels[name] for r in held]) if held else Judged()
    )
    on_old = _judge(old, new_head, X[pick], [kept[1][i] for i in pick]) if n_kept else Judged()
    promoted, why = _verdict(on_feedback, on_old, s)
    marks = {"through": through, "tried": max(r.id for r in pending)}
    if promoted:
        marks["through"] = marks["tried"]
    if promoted and held and fit == "warm" and not s.dry_run:
        every = _rows_of(kept, rest + held, name)  # the rows of X, in its order
        candidate.refit_head(
            name, every[0], every[1], groups=every[2], seed=s.seed, features=X, search=False
        )
    if not s.dry_run:
        if promoted:
            data = _rows_of(kept, pending, name)
            generation = bundle.promote_head(name, candidate, marks, why, keep=s.keep, data=data)
        else:
            bundle.mark_feedback(name, marks, why)
    return HeadUpdate(
        head=name,
        promoted=promoted,
        reason=why,
        generation=generation,
        rows_kept=n_kept,
        rows_feedback=len(pending),
        rows_held_back=len(held),
        rows_old=on_old.n,
        before=on_feedback.before,
        after=on_feedback.after,
        before_old=on_old.before,
        after_old=on_old.after,
        fit=fit,
        seconds=round(time.perf_counter() - t0, 3),
    )


def update_heads(
    bundle: Any,
    heads: Sequence[str] | str | None = None,
    settings: UpdateSettings | None = None,
) -> UpdateReport:
    """Update the heads ``heads`` (all by default) of ``bundle`` (a
    :class:`~manyheads.bundle.Bundle`) from their corrections (see the module
    docstring); the bundle holds the promoted heads afterwards, unsaved."""
    s = settings or UpdateSettings()
    names = bundle.resolve_heads(heads)
    rows = bundle.feedback_rows()
    vectors = _vectors_of(bundle)
    try:
        done = [_update_one(bundle, name, rows, s, vectors) for name in names]
    finally:
        _let_go(bundle.trunk, vectors)
    return UpdateReport(done, s.dry_run)
