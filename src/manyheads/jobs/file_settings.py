"""How a job reads its labelled file and caches its texts' vectors:
:class:`FileSettings`, the settings a job on a file shares with the others (a job's own
settings extend it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from .._settings import Rule, Settings, boolean, text
from ..data import Dataset
from .options import TaskSpec, cache_setting, read_tasks

__all__ = ["FILE_RULES", "POSITIVE", "FileSettings"]

F = TypeVar("F", bound="FileSettings")

# a count a job's option gives, or None for its default
POSITIVE = Rule(
    lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
    "a positive integer",
)
FILE_RULES: dict[str, Rule] = {
    "text_field": text(),
    "group_field": text(none=True),
    "label_sep": text(),
    "no_cache": boolean(),
    "device": text(),
}


@dataclass(frozen=True)
class FileSettings(Settings):
    """Where a row's text is (``text_field``), the field whose rows stay together when
    rows are split (``group_field``), what separates the labels of a list-per-item task
    written as text (``label_sep``); the embedding cache in ``cache_dir`` (default: the
    default cache), or none (``no_cache``); the ``device`` the trunk runs on (``auto``,
    ``cpu``, ``cuda``, ``cuda:N``)."""

    text_field: str = "text"
    group_field: str | None = None
    label_sep: str = ","
    cache_dir: str | Path | None = None
    no_cache: bool = False
    device: str = "auto"

    _constraints: ClassVar[Mapping[str, Rule]] = FILE_RULES

    @classmethod
    def split(cls: type[F], options: Mapping[str, Any], what: str = "") -> tuple[F, dict[str, Any]]:
        """The settings of ``options`` that are this class's fields, checked, and the
        other options."""
        own = set(cls.names())
        mine = {k: v for k, v in options.items() if k in own}
        return cls.of(mine, what), {k: v for k, v in options.items() if k not in own}

    def cache(self) -> Any:
        """The embedding cache a bundle is opened with
        (:func:`~manyheads.jobs.options.cache_setting`)."""
        return cache_setting(self.cache_dir, self.no_cache)

    def read_tasks(self, data: str | Path, specs: Sequence[TaskSpec]) -> Dataset:
        """``data``'s texts, groups and every task's labels, read and checked."""
        return read_tasks(data, specs, self.text_field, self.group_field, self.label_sep)
