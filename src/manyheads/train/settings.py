"""How a head is fitted: :class:`FitSettings`, the options of ``fit_head`` checked once
against one table of rules, then passed down whole."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .._settings import Rule, Settings, boolean, choice, number, text
from ..heads.kinds import PATH_SEP
from ..heads.settings import HEAD_RULES
from ..heads.tree import PRECISIONS, TREES_EXPECTED, trees_ok
from .parts import PART_WEIGHTS

__all__ = ["FitSettings", "HeadSummary"]

_RULES: dict[str, Rule] = {
    **HEAD_RULES,
    "val_fraction": number(0, 1),
    "refit": boolean(none=True),
    "field": text(none=True),
    "keep_data": boolean(),
    "progress": boolean(),
    "part_weights": choice(*PART_WEIGHTS),
    "beam": number(1, integer=True),
    "precision": choice(*PRECISIONS),
    "trees": Rule(trees_ok, TREES_EXPECTED),
}


@dataclass(frozen=True)
class FitSettings(Settings):
    """How :func:`~manyheads.train.fit.fit_head` fits a head (its options, described
    there), each checked when the object is made."""

    val_fraction: float = 0.2
    refit: bool | None = None
    field: str | None = None
    C: float | str = 1.0
    class_weight: str | dict[Any, float] | None = None
    head: str = "linear"
    thresholds: str = "f1"
    keep_data: bool = True
    seed: int = 0
    progress: bool = False
    path_sep: str = PATH_SEP
    part_weights: str = "fixed"
    beam: int = 10
    precision: str = "float16"
    trees: int | str = "auto"

    _constraints: ClassVar[Mapping[str, Rule]] = _RULES


@dataclass(frozen=True)
class HeadSummary:
    """What :meth:`Bundle.fit_head` (and ``add_head_from_labels``) reports."""

    name: str
    kind: str
    n_classes: int
    n_train: int
    n_val: int
    metrics: dict[str, Any]
    seconds: float
    embed_seconds: float
