"""A head's stored record (the JSON half of a head; the tensors are the other half) and
its info (kind, field, metrics, ...: what is said about the head): the one validator
of each that every way in goes through, and the caps on what a head may hold.

A record comes from a bundle's ``bundle.json`` (``Bundle.load``), from a client
(``PUT /v1/heads/NAME``) or from a head just trained; each is checked here, so a
head that loads also answers, and every answer is valid JSON: labels are
strings, integers, finite floats or booleans, unique; the temperature is a
finite number in ``[TEMPERATURE_MIN, TEMPERATURE_MAX]``; thresholds are
numbers in ``[0, 1]``, one per output.

:class:`HeadLimits` caps what a head may hold where heads are made or
installed (``fit_head``, ``import_head``, the service); ``Bundle.load`` reads a
bundle whatever its size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from .._text import unicode_problem
from ..errors import ConfigError, DataError
from .head_types import head_type
from .kinds import STORED_HEAD_TYPES, Kind, check_kind, kind_problem, label_problem

__all__ = [
    "HEAD_TYPES_STORED",
    "TEMPERATURE_MAX",
    "TEMPERATURE_MIN",
    "CheckedRecord",
    "HeadLimits",
    "check_info",
    "check_label_values",
    "check_record",
    "info_problems",
    "json_problem",
    "label_problem",
]

HEAD_TYPES_STORED = STORED_HEAD_TYPES  # the earlier name
# fitted temperatures lie in [e^-4, e^4]; anything far outside is a broken record
TEMPERATURE_MIN, TEMPERATURE_MAX = 1e-3, 1e3


@dataclass(frozen=True)
class HeadLimits:
    """Caps on the heads a bundle takes in (``fit_head``, ``import_head``, the service).

    ``max_labels``: labels (classes) of one dense head; ``max_label_chars``:
    characters of one label; ``max_heads``: heads in one bundle; ``max_tree_bytes``:
    the weights of one tree head (its labels' bound). Each refusal names its limit.
    """

    max_labels: int = 1000
    max_label_chars: int = 200
    max_heads: int = 256
    max_tree_bytes: int = 2 * 2**30

    def __post_init__(self) -> None:
        for name in ("max_labels", "max_label_chars", "max_heads", "max_tree_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")

    def check_labels(self, labels: Sequence[Any], where: str, *, extreme: bool = False) -> None:
        """Refuse more than ``max_labels`` labels (a dense head's; ``extreme``: a tree
        head's count is bounded by memory instead, :meth:`check_tree`) or one longer
        than ``max_label_chars``."""
        if len(labels) > self.max_labels and not extreme:
            raise DataError(
                f"{where}: {len(labels)} labels; a head takes at most {self.max_labels} "
                "(the max_labels limit)"
            )
        for label in labels:
            if isinstance(label, str) and len(label) > self.max_label_chars:
                raise DataError(
                    f"{where}: a label of {len(label)} characters ({label[:40]!r}...); labels "
                    f"take at most {self.max_label_chars} (the max_label_chars limit)"
                )

    def check_tree(
        self, n_labels: int, dim: int, precision: str, where: str, trees: int = 1
    ) -> None:
        """Refuse a tree head whose weights would pass ``max_tree_bytes``."""
        from .tree import memory_bound

        try:
            memory_bound(n_labels, dim, precision, self.max_tree_bytes, trees)
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from None

    def check_head_count(self, n_heads: int, where: str) -> None:
        if n_heads > self.max_heads:
            raise DataError(
                f"{where}: the bundle would hold {n_heads} heads; at most {self.max_heads} "
                "(the max_heads limit)"
            )


def check_label_values(labels: Any, where: str = "head") -> list[Any]:
    """A head's labels: a list of distinct strings / numbers / booleans."""
    if not isinstance(labels, list):
        raise DataError(f"{where}: 'labels' must be a list, got {type(labels).__name__}")
    for i, label in enumerate(labels):
        problem = label_problem(label)
        if problem is not None:
            raise DataError(f"{where}: label #{i} ({str(label)[:40]!r}) {problem}")
    keys = [(type(v).__name__, v) for v in labels]
    if len(set(keys)) != len(keys) or len(set(labels)) != len(labels):
        raise DataError(f"{where}: 'labels' holds the same label twice")
    return labels


@dataclass(frozen=True)
class CheckedRecord:
    """The JSON fields of a record, checked: what every reader of a record needs."""

    type: str
    kind: Kind
    labels: list[Any]
    temperature: float
    thresholds: np.ndarray | None  # binary: 1 value; multilabel / hierarchical: one per label
    params: dict[str, Any]
    tensors: dict[str, np.ndarray]  # float32, finite: coef, intercept / W1, b1, W2, b2
    path_sep: str | None = None  # hierarchical: what separates a label's parts

    @property
    def n_outputs(self) -> int:
        return self.kind.n_outputs(len(self.labels))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def check_record(record: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> CheckedRecord:
    """Check a head record, its JSON fields (type, kind, labels, temperature,
    thresholds, params) and its tensors; the one place that judges them (a bundle's
    heads, a PUT, a head just trained). Raises :class:`DataError`."""
    if not isinstance(record, Mapping):
        raise DataError(f"a head record must be an object, got {type(record).__name__}")
    htype = head_type(record.get("type", "linear"))  # unknown: refused before the rest
    named = record.get("kind")
    problem = kind_problem(named)
    if problem is not None:
        raise DataError(f"head {problem}")
    kind = check_kind(named)
    labels = check_label_values(record.get("labels"))
    path_sep = kind.check_stored_labels(labels, record.get("path_sep"))
    raw_t = record.get("temperature", 1.0)
    temperature = _number(raw_t)
    if temperature is None or not TEMPERATURE_MIN <= temperature <= TEMPERATURE_MAX:
        raise DataError(
            f"head temperature must be a number in [{TEMPERATURE_MIN:g}, {TEMPERATURE_MAX:g}], "
            f"got {raw_t!r}"
        )
    thresholds = None
    n_thr = kind.stored_thresholds(len(labels))
    if n_thr is not None:
        raw = record.get("thresholds")
        if raw is None:
            raw = [0.5] * n_thr
        if not isinstance(raw, list) or len(raw) != n_thr:
            raise DataError(f"head has {str(raw)[:60]} as thresholds, expected a list of {n_thr}")
        values = [_number(v) for v in raw]
        if any(v is None or not 0.0 <= v <= 1.0 for v in values):
            bad = next(r for r, v in zip(raw, values, strict=True) if v is None or not 0 <= v <= 1)
            raise DataError(f"head thresholds must be numbers in [0, 1], got {bad!r}")
        thresholds = np.asarray(values, dtype=np.float32)
    n_outputs = kind.n_outputs(len(labels))
    params = record.get("params") or {}
    if not isinstance(params, dict):
        raise DataError(f"head 'params' must be an object, got {type(params).__name__}")
    problem = json_problem(params)
    if problem is not None:
        raise DataError(f"head 'params' {problem}")
    return CheckedRecord(
        type=htype.name,
        kind=kind,
        labels=list(labels),
        temperature=temperature,
        thresholds=thresholds,
        params=dict(params),
        tensors=htype.check_tensors(kind, len(labels), n_outputs, tensors),
        path_sep=path_sep,
    )


# -- a head's info: what a record says about the head beside its weights ---------------

MAX_JSON_DEPTH = 16  # nesting of a head's metrics (and any other info value)


def json_problem(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is not plain JSON this project writes back (an object with text
    keys, a list, text UTF-8 can hold, a finite number, a boolean, null; at most
    :data:`MAX_JSON_DEPTH` deep), as the end of a sentence; None when it is."""
    if depth > MAX_JSON_DEPTH:
        return f"is nested more than {MAX_JSON_DEPTH} deep"
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"holds {value!r}, not a finite number"
    if isinstance(value, str):
        return unicode_problem(value)
    if isinstance(value, list):
        if all(type(v) is float for v in value):  # a vector: every number at once
            bad = (v for v in value if not math.isfinite(v))
            return next((f"holds {v!r}, not a finite number" for v in bad), None)
        return next((p for v in value if (p := json_problem(v, depth + 1))), None)
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"has a key {key!r} that is not text"
            problem = unicode_problem(key) or json_problem(item, depth + 1)
            if problem is not None:
                return problem
        return None
    return f"holds a {type(value).__name__}, not a JSON value"


# a field's judge: the end of a sentence saying what is wrong with a value, None if nothing
Judge: TypeAlias = Callable[[Any], "str | None"]


def _of_type(kind: type, noun: str, then: Judge) -> Judge:
    """The judge of a field that must be a ``kind`` (``noun`` in the message), its value
    then judged by ``then``."""

    def judge(value: Any) -> str | None:
        if not isinstance(value, kind):
            return f"must be {noun}, got {_type_name(value)}"
        return then(value)

    return judge


_text = _of_type(str, "text", unicode_problem)


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _count(value: Any) -> str | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return None
    return f"must be a count (an integer of 0 or more), got {_type_name(value)}"


_metrics = _of_type(dict, "an object of the head's figures", json_problem)


def _type_name(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {str(value)[:40]!r}"


# each field of a head's info a head may carry, and its judge; others are plain JSON
INFO_FIELDS = {
    "kind": _text,
    "field": _text,
    "trunk_fingerprint": _text,
    "metrics": _metrics,
    "n_train": _count,
    "n_val": _count,
    "data_hash": _optional_text,
    "data": _optional_text,
    "created": _optional_text,
    "head_type": _optional_text,
}


def info_problems(info: Mapping[str, Any]) -> dict[str, str]:
    """Each field of a head's ``info`` that is not what it must be, with why (the end of
    a sentence); empty when the info is fine. The one judgement of a head's info, used
    where heads come in (trained, imported, ``PUT``) and where a bundle is read."""
    found = {}
    for key, value in info.items():
        judge = INFO_FIELDS.get(key)
        problem = judge(value) if judge is not None else json_problem(value)
        if problem is None and judge is None and not isinstance(key, str):
            problem = "is not named by text"
        if problem is not None:
            found[str(key)] = problem
    return found


def check_info(info: Mapping[str, Any], where: str = "head") -> dict[str, Any]:
    """``info`` when every field is what it must be (:func:`info_problems`), else one
    :class:`DataError` naming the first field that is not."""
    for key, problem in info_problems(info).items():
        raise DataError(f"{where}: {key!r} {problem}")
    return dict(info)
