"""Names a package offers but imports on first use (what needs scikit-learn or the
training code: answering from a saved bundle imports neither)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``where`` maps a name to the module it
    comes from (relative to ``package``, e.g. ``".linear"``)."""

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(where[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
