"""Each head's drift: how far a window of its answers has moved from its reference.

**The reference.** When a head is trained, :func:`reference_profile` keeps (in its
info, ``info["reference"]``) what it answered on its validation split: the share of
each label it gave (a "no label" bucket for the answers without one: a multilabel or
hierarchical answer in which no label reached its threshold, or a blank text), a
histogram of its confidence in ten fixed bins over [0, 1], the mean confidence and
the number of rows. The confidence of an answer is its score (multiclass, binary:
the probability of the label given) or the highest score of the labels it gives
(multilabel, hierarchical: an answer with no label, or without scores, has none). A
head trained before references were kept has none: its row says so and it never
alarms.

**The distances.** A window of answers is compared with the reference twice, on the
labels given and on the confidence histogram, each with two distances of scipy:

- the population stability index, ``PSI = sum((w - r) * ln(w / r))``: the symmetric
  Kullback-Leibler divergence (:func:`scipy.special.rel_entr` both ways). It is the one
  that alarms: its behaviour on equal distributions is known (for counts of ``n_ref``
  and ``n_win`` rows it is close to ``chi2(k - 1) / n_eff`` with
  ``1 / n_eff = 1 / n_ref + 1 / n_win``: the chi-squared statistic of the two samples),
  so the alarm threshold can account for the sampling noise of a small reference or
  window over many labels, and, for rows that come in groups, for their design effects
  (Rao and Scott's first- and second-order corrections: :func:`design_effects`);
- the Jensen-Shannon distance (:func:`scipy.spatial.distance.jensenshannon`, base 2):
  between 0 and 1 and finite whatever the cells, the easier number to read and plot.

Empty cells are smoothed: each label (or bin) seen on either side gets half a count
on both sides (the Jeffreys prior), so a label the reference never gave does not
make the PSI infinite; labels neither side gave are left out.

**The alarm.** A head alarms when its window holds at least ``min_window`` answers
and the PSI of its labels or of its confidence is over its threshold, the larger of
``psi_alarm`` (default 0.25, the usual mark of a major shift) and the
``1 - alpha`` quantile (``alpha`` default 1e-4) of the chi-squared noise above,
``deff (1 + a^2) chi2((k - 1) / (1 + a^2)) / n_eff`` for a reference whose rows came
in groups (``design_effect``, ``design_spread``):
a window that only differs from the reference by chance stays under it. A window
rolls (the last ``window`` answers, default 1000), so the alarm clears again when
the inputs come back.

**The inputs.** A head's answers can stay put while its texts move: a head of 50
sections spreads texts of a new kind over sections it knows. So a reference also keeps
(``reference["inputs"]``, on a trunk with a part that maps texts by meaning: a
transformer, ``static``, a composite with one) where the texts the head was built on
lay: ``INPUT_COMPONENTS`` principal axes of that part's vectors, fitted on one half
of the head's rows (at most ``INPUT_ROWS`` of them, split by group), and, measured on
the other half, the mean, the variance along each axis and the design effect of the
mean along them (along axes fitted on the same rows, spread and clustering read larger
than new texts show them: the statistic below was half its chance size on stationary
streams). A window's vectors (those of the texts answered:
:func:`~manyheads.bundle.recheck.vectors_seen`) are projected on those axes, and their
mean is compared with the reference's by Hotelling's T²: the squared distance of the
two means along each axis over its variance, ``(1/n_ref + 1/n_win) * lambda_j *
deff``, summed. For windows drawn like the reference it is chi-squared with as many
degrees of freedom as axes; the head alarms when it passes the ``1 - alpha``
quantile. A head trained before this was kept, a trunk without such a part, a
window without vectors (answers read from a file, texts a service read in steps): no
input row, as before.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from .design import design_effect, design_effects, kept_design
from .inputs import Inputs, InputTally, input_t2, inputs_of

__all__ = [
    "BINS",
    "NO_LABEL",
    "DriftSettings",
    "DriftWindow",
    "answer_confidence",
    "answer_labels",
    "design_effect",
    "design_effects",
    "drift_table",
    "head_reference",
    "reference_profile",
]

BINS = 10  # confidence histogram: ten equal bins over [0, 1]
NO_LABEL = "(no label)"
_VERSION = 1
NO_REFERENCE = (
    "no reference: the head was trained before references were kept (train it again to "
    "watch its drift)"
)


@dataclass(frozen=True)
class DriftSettings:
    """How drift is measured.

    ``window``: the answers a rolling window holds (None: every answer observed);
    ``min_window``: the fewest answers before any alarm; ``psi_alarm``: the smallest
    PSI that alarms; ``alpha``: the chance that a window drawn like the reference is
    over the noise threshold (see the module docstring); ``smoothing``: the count
    added to each cell seen on either side."""

    window: int | None = 1000
    min_window: int = 200
    psi_alarm: float = 0.25
    alpha: float = 1e-4
    smoothing: float = 0.5

    def __post_init__(self) -> None:
        if self.window is not None and (
            isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1
        ):
            raise ConfigError(f"drift window must be a positive integer, got {self.window!r}")
        if isinstance(self.min_window, bool) or not isinstance(self.min_window, int):
            raise ConfigError(f"min_window must be an integer, got {self.min_window!r}")
        if self.min_window < 1 or (self.window is not None and self.min_window > self.window):
            raise ConfigError(
                f"min_window must be between 1 and the window ({self.window}), "
                f"got {self.min_window}"
            )
        for name, low, high in (("psi_alarm", 0.0, 100.0), ("alpha", 1e-12, 0.5)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{name} must be a number, got {value!r}")
            if not low < value <= high:
                raise ConfigError(f"{name} must be over {low:g} and at most {high:g}, got {value}")
        if not isinstance(self.smoothing, int | float) or not 0 < self.smoothing <= 10:
            raise ConfigError(f"smoothing must be over 0 and at most 10, got {self.smoothing!r}")


# -- one answer ---------------------------------------------------------------------


def answer_labels(answer: Mapping[str, Any] | None) -> list[str]:
    """The labels an answer gives, as text (``[NO_LABEL]`` when it gives none)."""
    if not answer:
        return [NO_LABEL]
    if "labels" in answer:
        labels = [str(v) for v in answer.get("labels") or ()]
        return labels or [NO_LABEL]
    label = answer.get("label")
    return [NO_LABEL] if label is None else [str(label)]


def answer_confidence(answer: Mapping[str, Any] | None) -> float | None:
    """An answer's confidence: its score, or (multilabel, hierarchical) the highest
    score of the labels it gives; None when it has none (no label, no scores)."""
    if not answer:
        return None
    if "labels" not in answer:
        score = answer.get("score")
        return None if score is None else float(score)
    scores = answer.get("scores")
    if not isinstance(scores, Mapping) or not scores:
        return None
    given = [scores[lab] for lab in answer.get("labels") or () if scores.get(lab) is not None]
    return float(max(given)) if given else None


def _bin(confidence: float) -> int:
    return min(BINS - 1, max(0, int(confidence * BINS)))


@dataclass
class _Tally:
    """Counts of a head's answers: labels given, confidence bins, rows."""

    labels: Counter[str] = field(default_factory=Counter)
    bins: list[int] = field(default_factory=lambda: [0] * BINS)
    confidence_sum: float = 0.0
    confidence_n: int = 0
    rows: int = 0
    no_label: int = 0

    def add(self, answer: Mapping[str, Any] | None) -> None:
        labels = answer_labels(answer)
        if len(labels) == 1:
            self.labels[labels[0]] += 1
            self.no_label += labels[0] == NO_LABEL
        else:
            self.labels.update(labels)
        self.rows += 1
        confidence = answer_confidence(answer)
        if confidence is not None:
            self.bins[_bin(confidence)] += 1
            self.confidence_sum += confidence
            self.confidence_n += 1

    @property
    def mean_confidence(self) -> float | None:
        return self.confidence_sum / self.confidence_n if self.confidence_n else None


def _tally(answers: Iterable[Mapping[str, Any] | None]) -> _Tally:
    tally = _Tally()
    for answer in answers:
        tally.add(answer)
    return tally


# -- the reference ------------------------------------------------------------------


def reference_profile(
    answers: Sequence[Mapping[str, Any] | None], groups: Sequence[Any] | None = None
) -> dict[str, Any]:
    """A head's reference from its answers (one head's, one per text, as
    ``Bundle.predict`` gives them): the share of each label given (``NO_LABEL``: none),
    the confidence histogram (``BINS`` bins over [0, 1]) and mean, the rows; with the
    rows' ``groups``, the design effect of the labels and of the confidence bins
    (:func:`design_effect`). Plain JSON, a few kilobytes at most."""
    t = _tally(answers)
    n = max(t.rows, 1)
    label_total = max(sum(t.labels.values()), 1)
    conf_n = max(t.confidence_n, 1)
    mean = t.mean_confidence
    out: dict[str, Any] = {
        "version": _VERSION,
        "n": t.rows,
        "labels": {k: round(v / label_total, 6) for k, v in sorted(t.labels.items())},
        "label_total": int(sum(t.labels.values())),
        "no_label_share": round(t.no_label / n, 6),
        "confidence": {
            "bins": BINS,
            "shares": [round(int(c) / conf_n, 6) for c in t.bins],
            "n": t.confidence_n,
            "mean": None if mean is None else round(mean, 6),
        },
    }
    if groups is not None and len(groups) == len(answers):
        conf = [answer_confidence(a) for a in answers]
        bins = [[] if c is None else [str(_bin(c))] for c in conf]
        labels = design_effects([answer_labels(a) for a in answers], groups)
        confidence = design_effects(bins, groups)
        out["design_effect"] = {
            "labels": round(labels[0], 4),
            "confidence": round(confidence[0], 4),
        }
        out["design_spread"] = {
            "labels": round(labels[1], 4),
            "confidence": round(confidence[1], 4),
        }
    return out


def head_reference(
    model: Any, X: Any, groups: Sequence[Any] | None = None, proba: Any = None
) -> dict[str, Any]:
    """The reference of a fitted head (``LinearHead`` / ``MLPHead``) from its answers to
    the rows ``X`` (in ``groups``, when given), or from probabilities ``proba`` it (or
    models like it) gave them."""
    from ..heads.decode import answers

    if proba is None:
        proba = model.predict_proba(X)
    found = answers(
        model.kind, model.classes_.tolist(), model.thresholds_, proba, "top", model.parents_
    )
    return reference_profile(found, groups)


# -- the distances ------------------------------------------------------------------


def _distances(
    ref: Mapping[str, float],
    ref_n: float,
    win: Mapping[str, float],
    win_n: float,
    s: DriftSettings,
    deff: float = 1.0,
    spread: float = 0.0,
) -> tuple[float, float, float]:
    """``(PSI, JS distance, PSI threshold)`` of window counts ``win`` (``win_n`` rows)
    against reference shares ``ref`` (``ref_n`` rows), rows drawn in groups with design
    effects of mean ``deff`` and squared coefficient of variation ``spread``."""
    from scipy.spatial.distance import jensenshannon
    from scipy.special import rel_entr
    from scipy.stats import chi2

    keys = sorted(k for k in {*ref, *win} if ref.get(k, 0) > 0 or win.get(k, 0) > 0)
    ref_total = sum(ref.values()) or 1.0
    win_total = sum(win.values()) or 1.0
    # counts on the scale of rows; half a count on each cell seen on either side
    r = np.array([ref.get(k, 0) / ref_total * ref_n for k in keys]) + s.smoothing
    w = np.array([win.get(k, 0) / win_total * win_n for k in keys]) + s.smoothing
    r, w = r / r.sum(), w / w.sum()
    psi = float(np.sum(rel_entr(w, r) + rel_entr(r, w)))  # KL both ways
    js = float(jensenshannon(w, r, base=2)) if len(keys) > 1 else 0.0
    n_eff = 1.0 / (1.0 / max(ref_n, 1.0) + 1.0 / max(win_n, 1.0))
    # Rao and Scott's second-order correction: the chance PSI, sum_j lambda_j chi2(1),
    # read as deff (1 + a^2) chi2(dof / (1 + a^2)) (Satterthwaite)
    dof = max(len(keys) - 1, 1) / (1.0 + spread)
    noise = float(chi2.ppf(1.0 - s.alpha, dof)) * deff * (1.0 + spread) / n_eff
    return psi, js, max(s.psi_alarm, noise)


def _r(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(float(value), digits)


def _row(
    info: Mapping[str, Any],
    t: _Tally,
    s: DriftSettings,
    inputs: tuple[Inputs, InputTally] | None = None,
) -> dict[str, Any]:
    """One head's row of the drift table (``inputs``: the head's inputs' reference, read,
    and the window's vectors projected on it)."""
    ref = info.get("reference")
    mean = t.mean_confidence
    row: dict[str, Any] = {
        "kind": info.get("kind"),
        "window": t.rows,
        "reference_n": None,
        "design_effect": None,
        "design_spread": None,
        "psi": None,
        "js": None,
        "psi_threshold": None,
        "confidence_psi": None,
        "confidence_js": None,
        "confidence_threshold": None,
        "mean_confidence": _r(mean),
        "reference_confidence": None,
        "confidence_change": None,
        "no_label_share": _r(t.no_label / t.rows) if t.rows else None,
        "reference_no_label_share": None,
        "inputs_t2": None,
        "inputs_threshold": None,
        "inputs_window": None,
        "alarm": False,
        "reason": "",
    }
    if not isinstance(ref, Mapping) or ref.get("version") != _VERSION:
        return row | {"reason": NO_REFERENCE}
    conf = ref.get("confidence") or {}
    ref_mean = conf.get("mean")
    change = None if mean is None or ref_mean is None else mean - float(ref_mean)
    row |= {
        "reference_n": int(ref.get("n", 0)),
        "reference_confidence": _r(ref_mean),
        "confidence_change": _r(change),
        "reference_no_label_share": _r(ref.get("no_label_share")),
    }
    if not t.rows:
        return row | {"reason": "no answers yet"}
    # labels on the scale of rows (a multilabel answer gives several, or none)
    ref_rows = float(ref.get("n", 0))
    labels_deff, labels_spread = kept_design(ref, "labels")
    row |= {"design_effect": labels_deff, "design_spread": labels_spread}
    psi, js, limit = _distances(
        ref.get("labels") or {}, ref_rows, t.labels, t.rows, s, labels_deff, labels_spread
    )
    row |= {"psi": _r(psi), "js": _r(js), "psi_threshold": _r(limit)}
    moved = [f"labels PSI {psi:.3f} > {limit:.3f}"] if psi > limit else []
    ref_bins = {str(i): float(v) for i, v in enumerate(conf.get("shares") or ())}
    if t.confidence_n and ref_bins and conf.get("n"):
        win_bins = {str(i): float(v) for i, v in enumerate(t.bins)}
        conf_deff, conf_spread = kept_design(ref, "confidence")
        cpsi, cjs, climit = _distances(
            ref_bins, float(conf["n"]), win_bins, t.confidence_n, s, conf_deff, conf_spread
        )
        row |= {"confidence_psi": _r(cpsi), "confidence_js": _r(cjs)}
        row["confidence_threshold"] = _r(climit)
        if cpsi > climit:
            moved.append(f"confidence PSI {cpsi:.3f} > {climit:.3f}")
    if inputs is not None and inputs[1].n:
        t2, tlimit = input_t2(*inputs, s.alpha)
        row |= {"inputs_t2": _r(t2, 3), "inputs_threshold": _r(tlimit, 3)}
        row["inputs_window"] = inputs[1].n
        if t2 > tlimit and inputs[1].n >= s.min_window:
            moved.append(f"inputs T² {t2:.1f} > {tlimit:.1f}")
    if t.rows < s.min_window:
        return row | {"reason": f"{t.rows} answers, fewer than the {s.min_window} to judge"}
    if moved:
        return row | {"alarm": True, "reason": "; ".join(moved)}
    return row | {"reason": "within the reference's range"}


def _settings(settings: DriftSettings | None) -> DriftSettings:
    if settings is None:
        return DriftSettings()
    if not isinstance(settings, DriftSettings):
        raise ConfigError(f"settings must be DriftSettings, got {type(settings).__name__}")
    return settings


def drift_table(
    head_info: Mapping[str, Mapping[str, Any]],
    answers: Iterable[Mapping[str, Any]],
    settings: DriftSettings | None = None,
    vectors: Any = None,
) -> dict[str, dict[str, Any]]:
    """Per head of ``head_info`` (``Bundle.head_info``), the drift of ``answers`` (one
    dict per text, ``{head: answer}`` as ``Bundle.predict`` gives them; every one, the
    window being the whole list) from the head's reference: ``window``, ``psi``, ``js``,
    ``psi_threshold``, ``confidence_psi``, ``confidence_js``, ``mean_confidence``,
    ``confidence_change``, ``no_label_share``, ``inputs_t2``, ``alarm``, ``reason``...
    (see the module docstring). ``vectors``: the trunk's vectors of the texts answered
    (``Bundle.embed``), for the inputs' rows."""
    s = _settings(settings)
    tallies = {name: _Tally() for name in head_info}
    for answer in answers:
        for name, tally in tallies.items():
            if name in answer:
                tally.add(answer[name])
    inputs: dict[str, tuple[Inputs, InputTally]] = {}
    for name, info in head_info.items():
        found = inputs_of(info.get("reference"))
        if found is not None and vectors is not None:
            inputs[name] = (found, InputTally())
            inputs[name][1].add(found.project(vectors))
    return {
        name: _row(info, tallies[name], s, inputs.get(name)) for name, info in head_info.items()
    }


# -- the rolling window -------------------------------------------------------------


def _identity(info: Mapping[str, Any]) -> tuple[Any, ...]:
    """What tells a head from the one it replaced."""
    ref = info.get("reference")
    n = ref.get("n") if isinstance(ref, Mapping) else None
    return (info.get("created"), info.get("data_hash"), info.get("kind"), n)


class DriftWindow:
    """The last ``settings.window`` answers of a service (every answer observed when the
    window is None), thread-safe, in bounded memory.

    :meth:`observe` only keeps the answers given (a few list operations, so answering
    is not slowed); :meth:`report` counts them. :meth:`observe_vectors` keeps the
    trunk's vectors of answered texts, projected on each head's inputs' axes (a small
    matrix product a pass; the last ``window`` rows a head). :meth:`follow` with a
    bundle's ``head_info`` starts a head's window again when the head was replaced
    (trained again, installed) and forgets removed heads."""

    def __init__(self, settings: DriftSettings | None = None) -> None:
        self.settings = _settings(settings)
        self._lock = threading.Lock()
        self._batches: deque[tuple[int, Sequence[Mapping[str, Any]]]] = deque()
        self._rows = 0  # rows the batches hold
        self._seen = 0  # rows observed so far
        self._since: dict[str, int] = {}  # a head's window starts at this row
        self._identity: dict[str, tuple[Any, ...]] = {}
        self._totals: dict[str, _Tally] = {}  # window None: running counts
        self._inputs: dict[str, Inputs] = {}  # each head's inputs' reference, read
        self._projected: dict[str, deque[np.ndarray]] = {}  # the window's, a head
        self._projected_rows: dict[str, int] = {}
        self._input_totals: dict[str, InputTally] = {}  # window None: running sums

    def observe(self, answers: Sequence[Mapping[str, Any]]) -> None:
        """Add answers (one dict per text, ``{head: answer}``) to the window."""
        if not answers:
            return
        with self._lock:
            start = self._seen
            self._seen += len(answers)
            if self.settings.window is None:
                for answer in answers:
                    for name, out in answer.items():
                        if start >= self._since.get(name, 0):
                            self._totals.setdefault(name, _Tally()).add(out)
                return
            self._batches.append((start, answers))
            self._rows += len(answers)
            window = self.settings.window
            while self._batches and self._rows - len(self._batches[0][1]) >= window:
                self._rows -= len(self._batches.popleft()[1])

    def observe_vectors(self, vectors: Any) -> None:
        """Add the trunk's vectors of answered texts (rows, dense or CSR) to the window
        of each head with an inputs' reference."""
        if vectors is None or vectors.shape[0] == 0:
            return
        with self._lock:
            inputs = dict(self._inputs)
        found = {name: ref.project(vectors) for name, ref in inputs.items()}
        window = self.settings.window
        with self._lock:
            for name, Z in found.items():
                if Z is None or self._inputs.get(name) is not inputs[name]:
                    continue  # the head was replaced meanwhile
                if window is None:
                    self._input_totals.setdefault(name, InputTally()).add(Z)
                    continue
                kept = self._projected.setdefault(name, deque())
                kept.append(Z)
                rows = self._projected_rows.get(name, 0) + len(Z)
                while kept and rows - len(kept[0]) >= window:
                    rows -= len(kept.popleft())
                self._projected_rows[name] = rows

    def follow(self, head_info: Mapping[str, Mapping[str, Any]]) -> None:
        """The heads answering from now on: a head replaced since starts again."""
        with self._lock:
            for name, info in head_info.items():
                ident = _identity(info)
                replaced = self._identity.get(name, ident) != ident
                if replaced or name not in self._identity:  # its reference, read once
                    self._forget_inputs(name)
                    found = inputs_of(info.get("reference"))
                    if found is not None:
                        self._inputs[name] = found
                if replaced:
                    self._since[name] = self._seen
                    self._totals.pop(name, None)
                self._identity[name] = ident
            for name in [n for n in self._identity if n not in head_info]:
                self._identity.pop(name)
                self._since[name] = self._seen
                self._totals.pop(name, None)
                self._forget_inputs(name)

    def _forget_inputs(self, name: str) -> None:
        for kept in (self._inputs, self._projected, self._projected_rows, self._input_totals):
            kept.pop(name, None)

    def report(self, head_info: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """The drift table (:func:`drift_table`'s rows) of the window, for the heads of
        ``head_info``."""
        with self._lock:
            batches = list(self._batches)
            since = dict(self._since)
            totals = {n: t for n, t in self._totals.items() if n in head_info}
            window = self.settings.window
            seen = self._seen
            inputs: dict[str, tuple[Inputs, InputTally]] = {}
            for name in head_info:
                if name not in self._inputs:
                    continue
                projected = InputTally()
                if window is None and name in self._input_totals:
                    projected = dataclasses.replace(self._input_totals[name])
                elif window is not None and self._projected.get(name):
                    projected.add(np.concatenate(list(self._projected[name]))[-window:])
                inputs[name] = (self._inputs[name], projected)
        if window is None:
            return {
                name: _row(info, totals.get(name, _Tally()), self.settings, inputs.get(name))
                for name, info in head_info.items()
            }
        first = max(0, seen - window)  # the oldest row still in the window
        tallies = {name: _Tally() for name in head_info}
        for start, batch in batches:
            for i, answer in enumerate(batch):
                row = start + i
                if row < first:
                    continue
                for name, tally in tallies.items():
                    if row >= since.get(name, 0) and name in answer:
                        tally.add(answer[name])
        return {
            name: _row(info, tallies[name], self.settings, inputs.get(name))
            for name, info in head_info.items()
        }

    @property
    def size(self) -> int:
        """Answers observed and still in the window."""
        with self._lock:
            window = self.settings.window
            return self._seen if window is None else min(self._rows, window)
