"""The rules of the settings a head is made with, one place for each (the heads'
``check_params`` and ``train.settings.FitSettings`` both check with them)."""

from __future__ import annotations

import numbers
from typing import Any

from .._settings import Rule, choice, number
from .calibration import THRESHOLD_OBJECTIVES
from .kinds import HEAD_TYPES

__all__ = ["HEAD_RULES"]


def _c(value: Any) -> bool:
    if value == "auto":
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value) > 0


def _class_weight(value: Any) -> bool:
    return value is None or value == "balanced" or isinstance(value, dict)


def _path_sep(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and value == value.strip()


HEAD_RULES: dict[str, Rule] = {
    "C": Rule(_c, "a positive number or 'auto'"),
    "class_weight": Rule(_class_weight, "None, 'balanced' or a dict"),
    "thresholds": choice(*THRESHOLD_OBJECTIVES),
    "head": choice(*HEAD_TYPES),
    "path_sep": Rule(_path_sep, "a non-empty string without spaces"),
    "seed": number(0, integer=True),
}
