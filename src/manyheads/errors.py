"""Exceptions raised by manyheads.

Every user-facing failure derives from :class:`ManyheadsError`; the CLI turns
these into a one-line message and exit code 1. They also derive from the
built-in exception a Python user would expect (``ValueError``, ``KeyError``,
``FileNotFoundError``), so ordinary ``except`` clauses keep working.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "BundleConflictError",
    "BundleError",
    "ConfigError",
    "DataError",
    "FingerprintMismatchError",
    "ManyheadsError",
    "MissingDependencyError",
    "UnknownHeadError",
]


class ManyheadsError(Exception):
    """Base class of every error manyheads raises on purpose."""


class DataError(ManyheadsError, ValueError):
    """Input data is malformed: a missing field, an empty text, a bad label."""


class BundleError(ManyheadsError, ValueError):
    """A bundle folder is missing, unreadable, or inconsistent."""


class BundleConflictError(BundleError):
    """A save that cannot be merged onto what another writer saved meanwhile (the
    trunk changed on one side); nothing was written."""


class UnknownHeadError(ManyheadsError, KeyError):
    """A head name that the bundle does not have."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class FingerprintMismatchError(ManyheadsError, ValueError):
    """A head or bundle was trained on a different trunk."""


class MissingDependencyError(ManyheadsError, ImportError):
    """An optional dependency is not installed; the message names the extra."""


def require(module: str, extra: str) -> Any:
    """Import ``module`` or raise :class:`MissingDependencyError` naming the pip extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{module!r} is not installed; install it with: pip install 'manyheads[{extra}]'"
        ) from exc


class ConfigError(ManyheadsError, ValueError):
    """A bad parameter or option: names the parameter, the value and the valid choices.

    A message may name parameters as ``{name}`` fields, listed in ``options``: the
    message reads with the parameters' Python names, and a front end shows its own
    names for them (the CLI its flags: ``--trunk-epochs`` for ``trunk_epochs``) with
    :meth:`render`.
    """

    def __init__(self, message: str, *, options: Sequence[str] = ()) -> None:
        self.template = message
        self.options = tuple(options)
        super().__init__(self.render(lambda name: name))

    def render(self, name: Callable[[str], str]) -> str:
        """The message with each named parameter ``{option}`` written as ``name(option)``."""
        text = self.template
        for option in self.options:
            text = text.replace("{" + option + "}", name(option))
        return text


def positive_int(value: Any, name: str) -> int:
    """``value`` when it is a positive integer (not a bool), else a :class:`ConfigError`
    naming the parameter ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{{{name}}} must be a positive integer, got {value!r}", options=(name,))
    return value


def one_of(value: Any, choices: Sequence[str], name: str) -> str:
    """``value`` when it is one of ``choices``, else a :class:`ConfigError` naming the
    parameter ``name`` and the choices."""
    if value not in choices:
        raise ConfigError(
            f"{{{name}}} must be one of {', '.join(choices)}, got {value!r}", options=(name,)
        )
    return value
