"""Settings objects: frozen dataclasses whose values are checked once, when one is made,
against a table of rules (one rule per setting, as scikit-learn's
``_parameter_constraints``), and then passed down whole instead of as a dozen keyword
arguments. A rule's message names the setting as a ``{name}`` field of a
:class:`~manyheads.errors.ConfigError`, so the command line shows its flag."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from .errors import ConfigError

__all__ = ["Rule", "Settings", "boolean", "check_values", "choice", "number", "text"]

S = TypeVar("S", bound="Settings")


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a setting accepts (``accepts(value)``) and how a message says it
    (``expected``: "a number in [0, 1)")."""

    accepts: Callable[[Any], bool]
    expected: str

    def check(self, name: str, value: Any) -> None:
        if not self.accepts(value):
            raise ConfigError(f"{{{name}}} must be {self.expected}, got {value!r}", options=(name,))


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def choice(*choices: Any) -> Rule:
    """One of ``choices``."""
    shown = ", ".join(str(c) for c in choices)
    return Rule(lambda v: isinstance(v, str | type(None)) and v in choices, f"one of {shown}")


def boolean(*, none: bool = False) -> Rule:
    """``True`` or ``False`` (or ``None`` with ``none``)."""
    return Rule(
        lambda v: isinstance(v, bool) or (none and v is None),
        "true, false or None" if none else "true or false",
    )


def text(*, none: bool = False) -> Rule:
    """A non-empty string (or ``None`` with ``none``)."""
    return Rule(
        lambda v: (isinstance(v, str) and bool(v)) or (none and v is None),
        "a non-empty string or None" if none else "a non-empty string",
    )


def number(
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = True,
    integer: bool = False,
    none: bool = False,
) -> Rule:
    """A number (an integer with ``integer``) from ``low`` to ``high``, each end in or
    out (``low_open`` / ``high_open``), finite (or ``None`` with ``none``)."""

    def accepts(v: Any) -> bool:
        if none and v is None:
            return True
        if not _real(v) or (integer and not isinstance(v, numbers.Integral)):
            return False
        if not math.isfinite(float(v)):
            return False
        above = v > low if low_open else v >= low
        below = v < high if high_open else v <= high
        return above and below

    what = "an integer" if integer else "a number"
    if math.isinf(high):
        expected = f"{what} {'>' if low_open else '>='} {low:g}"
    else:
        expected = (
            f"{what} in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        )
    return Rule(accepts, expected + (" or None" if none else ""))


def check_values(values: Mapping[str, Any], rules: Mapping[str, Rule]) -> None:
    """Every value of ``values`` that has a rule, checked by it (one line each)."""
    for name, rule in rules.items():
        if name in values:
            rule.check(name, values[name])


class Settings:
    """A base for frozen dataclasses of settings: ``_constraints`` maps a field to its
    :class:`Rule`, checked when the object is made; :meth:`of` makes one from options
    by name, refusing a name it does not have."""

    _constraints: ClassVar[Mapping[str, Rule]] = {}

    def __post_init__(self) -> None:
        check_values(self.values(), self._constraints)

    def values(self) -> dict[str, Any]:
        """The settings by name (a shallow copy)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]

    @classmethod
    def of(cls: type[S], options: Mapping[str, Any], what: str = "") -> S:
        """The settings of ``options`` (the others at their defaults); an option that is
        not a setting is refused, naming the known ones."""
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            raise ConfigError(
                f"{what or cls.__name__} has no option {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(cls.names())}"
            )
        return cls(**options)

    @classmethod
    def merged(cls: type[S], settings: S | None, options: Mapping[str, Any], what: str = "") -> S:
        """``settings`` (default: every setting at its default) with ``options`` (by
        name) over it, checked."""
        if settings is not None and not options:
            return settings
        return cls.of({**(settings or cls()).values(), **options}, what)

    def replace(self: S, **changes: Any) -> S:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]
