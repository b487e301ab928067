"""A bundle's head set: one immutable snapshot of every head's record, info, built
estimator and the fused matrix, swapped whole (a pass reads one snapshot)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeAlias

import numpy as np

from ..heads import FusedHeads, any_head_from_record

Record: TypeAlias = "tuple[dict[str, Any], dict[str, np.ndarray]]"


class LazyHeads(Mapping[str, Any]):
    """``{name: head}`` whose estimators are rebuilt from their records on first access.

    Answering needs only the records (numpy); the scikit-learn estimators are
    built when something asks for them (evaluation, refits, ``bundle.heads[n]``).
    """

    def __init__(self, records: Mapping[str, Record], built: Mapping[str, Any]) -> None:
        self._records = records
        self._built = {n: h for n, h in built.items() if n in records}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Any:
        head = self._built.get(name)
        if head is None:
            record, tensors = self._records[name]
            with self._lock:
                head = self._built.get(name)
                if head is None:
                    head = self._built[name] = any_head_from_record(record, tensors)
        return head

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def built(self) -> dict[str, Any]:
        """The estimators built so far."""
        return dict(self._built)

    def __repr__(self) -> str:
        return f"<heads {list(self._records)}>"


@dataclass(frozen=True)
class HeadSet:
    """An immutable snapshot of the head set: swapped whole, never edited in place."""

    records: Mapping[str, Record] = field(default_factory=dict)
    info: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    heads: LazyHeads = field(default_factory=lambda: LazyHeads({}, {}))
    fused: FusedHeads | None = None

    @staticmethod
    def build(records: dict[str, Record], info: dict[str, dict[str, Any]]) -> HeadSet:
        records = dict(records)
        return HeadSet(
            records=MappingProxyType(records),
            info=MappingProxyType(dict(info)),
            heads=LazyHeads(records, {}),
            fused=FusedHeads.from_records(records) if records else None,
        )

    def replace(
        self,
        records: dict[str, Record],
        info: dict[str, dict[str, Any]],
        built: Mapping[str, Any] = MappingProxyType({}),
    ) -> HeadSet:
        """The next snapshot: heads whose record object is unchanged keep their checked
        spec and their built estimator; ``built`` adds estimators of new heads."""
        records = dict(records)
        same = {n for n, r in records.items() if self.records.get(n) is r}
        estimators = {n: h for n, h in self.heads.built().items() if n in same}
        known = {n: self.fused.specs[n] for n in same} if self.fused is not None else None
        return HeadSet(
            records=MappingProxyType(records),
            info=MappingProxyType(dict(info)),
            heads=LazyHeads(records, {**estimators, **built}),
            fused=FusedHeads.from_records(records, known) if records else None,
        )
