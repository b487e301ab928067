"""The folder half of :class:`~manyheads.bundle.Bundle`: saving (atomic, under the
folder's writers' lock, merging onto what another writer saved), loading, kept
training data, and a byte bundle's tiers (sub-bundles in ``tiers/<dim>/``)."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .._io import atomic_write_bytes, atomic_write_text, describe_os_error
from ..errors import BundleConflictError, BundleError, DataError, FingerprintMismatchError
from ..heads.record import HeadLimits
from ..trunks import Trunk, TrunkBase, load_trunk
from ..trunks.registry import spec_graph, spec_keeps_files
from .builtin import bundle_tiers, check_writable
from .format import (
    KeptData,
    document,
    parse_document,
    read_kept_data,
    read_tensors,
    write_kept_data,
)
from .state import HeadSet
from .store import (
    BUNDLE_JSON,
    HEADS_FILE,
    TIERS_DIR,
    OnDisk,
    collect_garbage,
    folder_lock,
    own_path,
    read_folder,
)

if TYPE_CHECKING:
    from typing_extensions import Self

    from ..cache import EmbeddingCache
    from ..trunks.byte import ByteTrunk
    from ..trunks.onnxrt import OnnxTrunk

__all__ = ["BundleFolder"]

_DEFAULT = "default"


class BundleFolder:
    """Saving, loading and tiers of a bundle (a part of :class:`Bundle`)."""

    # set by Bundle
    _changes: dict[str, bool]
    _trunk: TrunkBase | None
    _trunk_state: dict[str, np.ndarray]
    _data: dict[str, KeptData]
    _trunk_ref: dict[str, Any]
    _cache_arg: Any
    _state: HeadSet
    _lock: threading.RLock
    _trunk_weights: tuple[str, Path] | None
    path: Path | None
    generation: str | None

    @property
    def trunk(self) -> TrunkBase:
        raise NotImplementedError

    @property
    def trunk_fingerprint(self) -> str:
        raise NotImplementedError

    @property
    def tier(self) -> int | None:
        raise NotImplementedError

    @property
    def head_info(self) -> Mapping[str, dict[str, Any]]:
        raise NotImplementedError

    @staticmethod
    def _reference(trunk: TrunkBase) -> dict[str, Any]:
        raise NotImplementedError

    def _setup(
        self, ref: dict[str, Any], trunk_state: dict[str, np.ndarray], cache: Any, limits: Any
    ) -> None:
        raise NotImplementedError

    def _unknown(self, name: str) -> Exception:
        raise NotImplementedError

    @property
    def tiers(self) -> list[int]:
        """The tiers this saved byte bundle can be loaded at (``Bundle.load(path,
        tier=...)``): its own and those of its ``tiers/`` sub-bundles."""
        if self.path is None or not (self.path / BUNDLE_JSON).is_file():
            return [] if self.tier is None else [self.tier]
        return bundle_tiers(self.path)

    def tier_bundles(self) -> dict[int, Self]:
        """``{tier: bundle}`` of this saved byte bundle's other tiers (``tiers/<dim>/``),
        loaded with this bundle's cache."""
        if self.path is None:
            return {}
        return {
            t: type(self).load(self.path / TIERS_DIR / str(t), cache=self._cache_arg)
            for t in self.tiers
            if t != self.tier
        }

    def save_tiers(self, tiers: Mapping[int, Self]) -> dict[int, Path]:
        """Save bundles of this byte bundle's trunk at other tiers as its sub-bundles
        (``tiers/<dim>/`` of the folder this bundle was saved to); they use this
        bundle's ONNX graph file and trunk weights (its ``heads.safetensors``)
        rather than copies of them. Save this bundle first."""
        graph = spec_graph(self._trunk_ref["spec"])
        if self.path is None or graph is None:
            raise BundleError("save_tiers needs a byte bundle that was saved first")
        own = self.tier
        assert own is not None
        out = {}
        for tier, sub in tiers.items():
            trunk = sub.trunk
            if (
                trunk.tier != tier
                or tier == own
                or trunk.with_tier(own).fingerprint != self.trunk_fingerprint
            ):
                raise BundleError(
                    f"tier {tier}: give a bundle on this bundle's byte trunk at tier {tier}"
                )
            # the same weights: the parent's graph and weights files, named from tiers/<dim>/
            cast("ByteTrunk", trunk).share_graph(self.path, *graph)
            sub._trunk_weights = (f"../../{HEADS_FILE}", (self.path / HEADS_FILE).resolve())
            out[tier] = sub.save(self.path / TIERS_DIR / str(tier))
        return out

    def to_dict(self, generation: str) -> dict[str, Any]:
        return document(generation, self._trunk_ref, self._state.records, self._state.info)

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write the bundle folder atomically, holding its writers' lock; returns its path.

        If the folder holds a bundle saved by another writer since this one was
        loaded from it (or it holds a bundle and this one comes from elsewhere),
        this bundle's head changes are merged onto it: heads added or replaced
        here replace theirs, heads removed here go, every other head on disk
        stays, and this bundle then holds the merged head set. A bundle on
        another trunk cannot be merged: :class:`BundleConflictError`, and
        nothing is written. ``overwrite=True`` replaces whatever the folder
        holds with this bundle instead.
        """
        folder = Path(path)
        check_writable(folder)
        if folder.exists() and not folder.is_dir():
            raise BundleError(f"cannot save the bundle to {folder}: it is a file, not a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with self._lock, folder_lock(folder):
                on_disk = None if overwrite else read_folder(folder)
                if on_disk is not None and not self._is_base_of(folder, on_disk):
                    self._merge_onto(on_disk, folder)
                self._write(folder)
        except OSError as exc:
            raise BundleError(
                f"cannot save the bundle to {folder}: {describe_os_error(exc)}"
            ) from None
        return folder

    def _same_folder(self, folder: Path) -> bool:
        return self.path is not None and os.path.realpath(self.path) == os.path.realpath(folder)

    def _is_base_of(self, folder: Path, on_disk: OnDisk) -> bool:
        """True when the folder still holds the generation this bundle was loaded from
        or last saved there: nothing to merge."""
        return (
            self.generation is not None
            and on_disk.generation == self.generation
            and self._same_folder(folder)
        )

    def _merge_onto(self, on_disk: OnDisk, folder: Path) -> None:
        """Make this bundle the folder's bundle plus this bundle's head changes."""
        ours = self._trunk_ref
        found = on_disk.doc.get("trunk")
        theirs: dict[str, Any] = found if isinstance(found, dict) else {}
        same_folder = self._same_folder(folder)
        if theirs.get("fingerprint") != ours["fingerprint"]:
            if same_folder:
                raise BundleConflictError(
                    f"cannot save the bundle to {folder}: another writer saved it meanwhile "
                    f"(generation {on_disk.generation}) with trunk {theirs.get('name')!r} "
                    f"(fingerprint {theirs.get('fingerprint')}), and this bundle's trunk is "
                    f"{ours['name']!r} (fingerprint {ours['fingerprint']}); nothing was "
                    "written: load the bundle again and redo the change"
                )
            raise BundleConflictError(
                f"cannot save the bundle to {folder}: it holds a bundle on trunk "
                f"{theirs.get('name')!r} (fingerprint {theirs.get('fingerprint')}), not this "
                f"bundle's {ours['name']!r} (fingerprint {ours['fingerprint']}); save it "
                "elsewhere, or replace that bundle (save(..., overwrite=True))"
            )
        disk = parse_document(on_disk.doc, read_tensors(on_disk, folder), folder)
        try:  # their heads are checked as a load checks them
            HeadSet.build(disk.records, disk.infos)
        except DataError as exc:
            raise BundleError(f"{folder / BUNDLE_JSON}: {exc}") from exc
        changes = dict(self._changes) if same_folder else dict.fromkeys(self._state.records, True)
        records, infos = dict(disk.records), dict(disk.infos)
        for name, keep in changes.items():
            if keep and name in self._state.records:
                records[name], infos[name] = self._state.records[name], self._state.info[name]
            else:
                records.pop(name, None)
                infos.pop(name, None)
        # their heads' kept data is in the folder; ours comes from memory or our folder
        for name in set(records) - {n for n, keep in changes.items() if keep}:
            rel = infos[name].get("data")
            if rel:
                self._data.pop(str(rel), None)
        if disk.trunk["spec"] != ours["spec"]:  # e.g. a graph rewritten with their heads
            self._trunk_ref = disk.trunk
            self._trunk_state = disk.trunk_state
            self._trunk = None
        self._state = self._state.replace(records, infos)

    def _write(self, folder: Path) -> None:
        """Write every file of this bundle into ``folder`` (its lock held): new files
        first, then the weights and ``bundle.json`` renamed into place, then what the
        saved bundle no longer names is removed."""
        from safetensors.numpy import save as st_save

        check_writable(folder)  # again, holding the lock: no data/ link leading out
        self._save_trunk_files(folder)
        generation = uuid.uuid4().hex
        doc = self.to_dict(generation)
        shared = self._trunk_weights
        if shared is not None and (folder / shared[0]).resolve() != shared[1]:
            shared = None  # saved elsewhere: the weights go into this folder
        if shared is not None:
            doc["trunk_weights"] = shared[0]

        text = json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=False) + "\n"
        tensors: dict[str, np.ndarray] = {}
        for name, (_, ts) in self._state.records.items():
            for key, arr in ts.items():
                tensors[f"heads/{name}/{key}"] = arr
        if shared is None and not self._trunk_in_graph():
            for key, arr in self._current_trunk_state().items():
                tensors[f"trunk/{key}"] = np.ascontiguousarray(arr)
        self._save_data(folder)
        blob = st_save(tensors, metadata={"generation": generation, "bundle_json": text})
        atomic_write_bytes(folder / HEADS_FILE, blob)
        atomic_write_text(folder / BUNDLE_JSON, text)
        collect_garbage(folder, text)
        self.path = folder
        self.generation = generation
        self._trunk_weights = shared
        self._changes = {}

    def _save_trunk_files(self, folder: Path) -> None:
        """A trunk that keeps files in the bundle folder (a byte trunk's graph, an
        exported trunk's graph and tokenizer) puts them there, and an exported graph gets
        the current heads written into it (:mod:`~manyheads.bundle.graph`); bundle.json
        then names them. Decided from the spec, so a loaded bundle whose trunk was never
        built (and holds no files) is saved without building it."""
        if not spec_keeps_files(self._trunk_ref["spec"]):
            return
        trunk = self.trunk
        trunk.save_files(folder)
        held = trunk.graph_heads()
        fused = self._state.fused
        wanted = {} if fused is None else {n: s.digest for n, s in fused.specs.items()}
        if held is not None and held != wanted:
            from .graph import graph_file_name, rewrite_heads

            exported = cast("OnnxTrunk", trunk)  # the trunk whose graph holds heads
            sha = rewrite_heads(folder, exported, fused)
            exported.reload(graph_file_name(sha), sha)
        self._trunk_ref = self._reference(trunk)

    def _trunk_in_graph(self) -> bool:
        """True when the trunk's graph file in the bundle holds every weight unchanged:
        the weights are then stored once, in the graph (a byte trunk)."""
        if spec_graph(self._trunk_ref["spec"]) is None:
            return False
        return self.trunk.weights_in_graph()

    def _save_data(self, folder: Path) -> None:
        """Write each kept training set once (content-addressed); the ones no head uses any
        more go after the save (``collect_garbage``)."""
        wanted = {str(i["data"]) for i in self._state.info.values() if i.get("data")}
        for rel in sorted(wanted):
            target = own_path(folder, rel)
            if target.exists():
                continue
            if rel not in self._data:
                source = None if self.path is None else self.path / rel
                if source is not None and source.is_file() and source.resolve() != target.resolve():
                    atomic_write_bytes(target, source.read_bytes())
                continue
            write_kept_data(target, self._data[rel])

    def training_data(self, name: str) -> KeptData | None:
        """The texts, labels and groups head ``name`` was trained on, if the bundle kept them."""
        info = self.head_info.get(name)
        if info is None:
            raise self._unknown(name)
        rel = info.get("data")
        if not rel:
            return None
        if rel in self._data:
            return self._data[rel]
        path = None if self.path is None else own_path(self.path, rel)
        if path is None or not path.is_file():
            raise BundleError(
                f"the kept training data of head {name!r} ({rel}) is missing from "
                f"{self.path}; the head cannot be refitted (train it again)"
            )
        data = read_kept_data(path, name, info.get("data_hash"))
        self._data[rel] = data
        return data

    def _current_trunk_state(self) -> dict[str, np.ndarray]:
        """Fitted arrays of the trunk (idf of a hashing part), stored in heads.safetensors."""
        if self._trunk is not None:
            return dict(self._trunk.state())
        return dict(self._trunk_state)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        cache: str | Path | EmbeddingCache | None = _DEFAULT,
        trunk: Trunk | None = None,
        tier: int | None = None,
        limits: HeadLimits | None = None,
    ) -> Self:
        """Load a bundle folder. The trunk is built on first use (or given as ``trunk``).

        ``path`` may also name a built-in bundle (``"content"``), see
        :func:`~manyheads.bundle.bundle_folder`. ``tier``: for a byte bundle, the tier
        (nested embedding size) to answer at; a tier other than the bundle's own loads
        the sub-bundle fitted at that tier (``tiers/<tier>/``). ``limits``: the caps
        on heads added later (a bundle loads whatever its heads hold).
        """
        from .builtin import bundle_folder

        folder = bundle_folder(path, tier)
        on_disk = read_folder(folder)
        if on_disk is None:
            raise BundleError(f"no bundle at {folder} (missing {BUNDLE_JSON})")
        parsed = parse_document(on_disk.doc, read_tensors(on_disk, folder), folder)
        bundle: Any = cls.__new__(cls)
        bundle._setup(parsed.trunk, parsed.trunk_state, cache, limits)
        if trunk is not None:
            given = load_trunk(trunk)
            if given.fingerprint != parsed.trunk["fingerprint"]:
                raise FingerprintMismatchError(
                    f"the bundle was trained on trunk fingerprint {parsed.trunk['fingerprint']}, "
                    f"the trunk given has fingerprint {given.fingerprint}"
                )
            bundle._trunk = given
        try:  # checks every head's record and tensor shapes
            bundle._state = HeadSet.build(parsed.records, parsed.infos)
        except DataError as exc:
            raise BundleError(f"{folder / BUNDLE_JSON}: {exc}") from exc
        bundle.path = folder
        bundle.generation = on_disk.doc.get("generation")
        shared = on_disk.doc.get("trunk_weights")
        if shared is not None:
            bundle._trunk_weights = (shared, (folder / shared).resolve())
        if tier is not None and bundle.tier != tier:
            raise BundleError(
                f"{folder / BUNDLE_JSON}: expected a bundle at tier {tier}, found {bundle.tier}"
            )
        return bundle
