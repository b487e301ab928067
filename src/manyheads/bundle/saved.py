"""What a bundle is, as plain data: :class:`BundleState`, one frozen record of the trunk
reference, the trunk's fitted arrays, the head set, the kept training data and where
and as which generation it was last saved. A :class:`~manyheads.bundle.Bundle` holds
one and swaps it whole on every change; :mod:`~manyheads.bundle.files` loads one
from a folder and saves one into a folder."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..trunks import TrunkBase
from .format import KeptData
from .state import HeadSet

__all__ = ["BundleState", "trunk_reference"]


def trunk_reference(trunk: TrunkBase) -> dict[str, Any]:
    """What ``bundle.json`` says of a trunk: name, fingerprint (``None`` until it is
    fitted), dim, spec."""
    return {
        "name": trunk.name,
        "fingerprint": None if trunk.needs_fit else trunk.fingerprint,
        "dim": int(trunk.dim),
        "spec": trunk.spec(),
    }


@dataclass(frozen=True)
class BundleState:
    """One bundle's saved state; never edited in place (:meth:`replace` gives the next).

    ``trunk``: the trunk reference (name, fingerprint, dim, spec). ``trunk_state``:
    the trunk's fitted arrays (a hashing part's idf). ``heads``: the head set.
    ``data``: kept training sets held in memory, by their path in the folder.
    ``changes``: heads added or replaced (True) or removed (False) since
    ``generation``, the ``bundle.json`` last loaded from or saved to ``path``; a save
    lays them onto what another writer saved meanwhile. ``trunk_weights``: (path
    relative to the folder, resolved file) of the file holding the trunk's weights
    when it is another bundle's (a tier's sub-bundle uses its parent's).
    """

    trunk: Mapping[str, Any]
    trunk_state: Mapping[str, np.ndarray] = field(default_factory=dict)
    heads: HeadSet = field(default_factory=HeadSet)
    data: Mapping[str, KeptData] = field(default_factory=dict)
    changes: Mapping[str, bool] = field(default_factory=dict)
    path: Path | None = None
    generation: str | None = None
    trunk_weights: tuple[str, Path] | None = None

    def replace(self, **changes: Any) -> BundleState:
        """The next state: these fields changed, the rest shared."""
        return replace(self, **changes)

    def with_heads(self, heads: HeadSet, changed: Mapping[str, bool]) -> BundleState:
        """The next state after a head change: ``changed`` maps each head added or
        replaced to True, each removed to False."""
        return replace(self, heads=heads, changes={**self.changes, **changed})

    @property
    def fingerprint(self) -> str | None:
        found = self.trunk["fingerprint"]
        return None if found is None else str(found)
