"""A bundle's state to and from its folder: :func:`load_folder`, :func:`save_folder`
(atomic, under the folder's writers' lock, merging onto what another writer saved),
:func:`build_trunk` (the trunk a state names, checked) and :func:`read_training_data`
(a head's kept training set). Functions of a :class:`~manyheads.bundle.saved.BundleState`;
nothing here knows the ``Bundle`` class."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .._io import atomic_write_bytes, atomic_write_text, describe_os_error
from ..errors import BundleConflictError, BundleError, DataError, FingerprintMismatchError
from ..trunks import TrunkBase, load_trunk
from ..trunks.registry import spec_graph, spec_keeps_files
from .builtin import check_writable
from .format import (
    KeptData,
    document,
    kept_prefix,
    parse_document,
    read_kept_data,
    read_tensors,
    write_kept_data,
)
from .saved import BundleState, trunk_reference
from .state import HeadSet
from .store import (
    BUNDLE_JSON,
    HEADS_FILE,
    OnDisk,
    collect_garbage,
    folder_lock,
    own_path,
    read_folder,
)

if TYPE_CHECKING:
    from ..trunks.onnxrt import OnnxTrunk

__all__ = ["build_trunk", "load_folder", "read_training_data", "save_folder", "trunk_arrays"]


def load_folder(folder: Path) -> BundleState:
    """The bundle a folder holds now (:func:`~manyheads.bundle.store.read_folder`),
    every head's record and tensor shapes checked; its trunk is not built."""
    on_disk = read_folder(folder)
    if on_disk is None:
        raise BundleError(f"no bundle at {folder} (missing {BUNDLE_JSON})")
    parsed = parse_document(on_disk.doc, read_tensors(on_disk, folder), folder)
    try:  # checks every head's record and tensor shapes
        heads = HeadSet.build(parsed.records, parsed.infos)
    except DataError as exc:
        raise BundleError(f"{folder / BUNDLE_JSON}: {exc}") from exc
    shared = on_disk.doc.get("trunk_weights")
    return BundleState(
        trunk=parsed.trunk,
        trunk_state=parsed.trunk_state,
        heads=heads,
        path=folder,
        generation=on_disk.doc.get("generation"),
        trunk_weights=None if shared is None else (shared, (folder / shared).resolve()),
    )


def build_trunk(state: BundleState) -> TrunkBase:
    """The trunk ``state`` names, built from its spec and fitted arrays (files relative
    to ``state.path``), refused when its fingerprint is not the one the heads were
    trained on."""
    ref = state.trunk
    trunk = load_trunk(ref["spec"], state=dict(state.trunk_state), base=state.path)
    if trunk.fingerprint != ref["fingerprint"]:
        raise FingerprintMismatchError(
            f"the bundle was trained on trunk {ref['name']!r} with "
            f"fingerprint {ref['fingerprint']}, but the trunk found here "
            f"has fingerprint {trunk.fingerprint}; its weights or settings differ"
        )
    return trunk


def trunk_arrays(state: BundleState, trunk: TrunkBase | None) -> dict[str, np.ndarray]:
    """The trunk's fitted arrays (a hashing part's idf), stored in ``heads.safetensors``:
    those of ``trunk``, the trunk built from ``state`` when one was, else the state's."""
    return dict(trunk.state() if trunk is not None else state.trunk_state)


def save_folder(
    state: BundleState, folder: Path, trunk: TrunkBase | None, *, overwrite: bool = False
) -> tuple[BundleState, TrunkBase | None]:
    """Write ``state`` into ``folder`` atomically, holding its writers' lock.

    ``trunk``: the trunk built from ``state``, if one was (it is built here when its
    files must be written). If the folder holds a bundle saved by another writer
    since ``state`` was loaded from it (or it holds a bundle and ``state`` comes from
    elsewhere), ``state``'s head changes are laid onto it: heads added or replaced
    here replace theirs, heads removed here go, every other head on disk stays. A
    bundle on another trunk cannot be merged: :class:`BundleConflictError`, and
    nothing is written. ``overwrite=True`` replaces whatever the folder holds.

    Returns the state saved (merged, at ``folder``, with its new generation and no
    pending changes) and the trunk built from it, if one is.
    """
    check_writable(folder)
    if folder.exists() and not folder.is_dir():
        raise BundleError(f"cannot save the bundle to {folder}: it is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with folder_lock(folder):
            on_disk = None if overwrite else read_folder(folder)
            if on_disk is not None and not _is_base_of(state, folder, on_disk):
                merged = _merge_onto(state, on_disk, folder)
                if merged.trunk["spec"] != state.trunk["spec"]:
                    trunk = None  # e.g. a graph rewritten with their heads
                state = merged
            return _write(state, folder, trunk)
    except OSError as exc:
        raise BundleError(f"cannot save the bundle to {folder}: {describe_os_error(exc)}") from None


def _same_folder(state: BundleState, folder: Path) -> bool:
    return state.path is not None and os.path.realpath(state.path) == os.path.realpath(folder)


def _is_base_of(state: BundleState, folder: Path, on_disk: OnDisk) -> bool:
    """True when the folder still holds the generation ``state`` was loaded from or last
    saved there: nothing to merge."""
    return (
        state.generation is not None
        and on_disk.generation == state.generation
        and _same_folder(state, folder)
    )


def _merge_onto(state: BundleState, on_disk: OnDisk, folder: Path) -> BundleState:
    """The folder's bundle plus ``state``'s head changes."""
    ours = state.trunk
    found = on_disk.doc.get("trunk")
    theirs: dict[str, Any] = found if isinstance(found, dict) else {}
    same_folder = _same_folder(state, folder)
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
    heads = state.heads
    changes = dict(state.changes) if same_folder else dict.fromkeys(heads.records, True)
    records, infos = dict(disk.records), dict(disk.infos)
    for name, keep in changes.items():
        if keep and name in heads.records:
            records[name], infos[name] = heads.records[name], heads.info[name]
        else:
            records.pop(name, None)
            infos.pop(name, None)
    # their heads' kept data is in the folder; ours comes from memory or our folder
    data = dict(state.data)
    for name in set(records) - {n for n, keep in changes.items() if keep}:
        rel = infos[name].get("data")
        if rel:
            data.pop(str(rel), None)
    merged = state.replace(heads=heads.replace(records, infos), data=data)
    if disk.trunk["spec"] != ours["spec"]:
        merged = merged.replace(trunk=disk.trunk, trunk_state=disk.trunk_state)
    return merged


def _write(
    state: BundleState, folder: Path, trunk: TrunkBase | None
) -> tuple[BundleState, TrunkBase | None]:
    """Write every file of ``state`` into ``folder`` (its lock held): new files first,
    then the weights and ``bundle.json`` renamed into place, then what the saved
    bundle no longer names is removed."""
    from safetensors.numpy import save as st_save

    check_writable(folder)  # again, holding the lock: no data/ link leading out
    if spec_keeps_files(state.trunk["spec"]):
        trunk = trunk or build_trunk(state)
        state = state.replace(trunk=_save_trunk_files(state, trunk, folder))
    generation = uuid.uuid4().hex
    doc = document(generation, dict(state.trunk), state.heads.records, state.heads.info)
    shared = state.trunk_weights
    if shared is not None and (folder / shared[0]).resolve() != shared[1]:
        shared = None  # saved elsewhere: the weights go into this folder
    if shared is not None:
        doc["trunk_weights"] = shared[0]

    text = json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=False) + "\n"
    tensors: dict[str, np.ndarray] = {}
    for name, (_, ts) in state.heads.records.items():
        for key, arr in ts.items():
            tensors[f"heads/{name}/{key}"] = arr
    if shared is None and not _trunk_in_graph(state, trunk):
        for key, arr in trunk_arrays(state, trunk).items():
            tensors[f"trunk/{key}"] = np.ascontiguousarray(arr)
    _save_data(state, folder)
    blob = st_save(tensors, metadata={"generation": generation, "bundle_json": text})
    atomic_write_bytes(folder / HEADS_FILE, blob)
    atomic_write_text(folder / BUNDLE_JSON, text)
    collect_garbage(folder, text)
    # the kept rows no head names any more leave memory too (they are not in the folder
    # either): a service that updates its heads for months holds its current rows only
    named = {str(i["data"]) for i in state.heads.info.values() if i.get("data")}
    data = {rel: rows for rel, rows in state.data.items() if rel in named}
    saved = state.replace(
        path=folder, generation=generation, trunk_weights=shared, changes={}, data=data
    )
    return saved, trunk


def _save_trunk_files(state: BundleState, trunk: TrunkBase, folder: Path) -> dict[str, Any]:
    """A trunk that keeps files in the bundle folder (a byte trunk's graph, an exported
    trunk's graph and tokenizer) puts them there, and an exported graph gets the
    current heads written into it (:mod:`~manyheads.bundle.graph`); returns the trunk
    reference that then names them. Decided from the spec, so a loaded bundle whose
    trunk was never built (and holds no files) is saved without building it."""
    trunk.save_files(folder)
    held = trunk.graph_heads()
    fused = state.heads.fused
    wanted = {} if fused is None else {n: s.digest for n, s in fused.specs.items()}
    if held is not None and held != wanted:
        from .graph import graph_file_name, rewrite_heads

        exported = cast("OnnxTrunk", trunk)  # the trunk whose graph holds heads
        sha = rewrite_heads(folder, exported, fused)
        exported.reload(graph_file_name(sha), sha)
    return trunk_reference(trunk)


def _trunk_in_graph(state: BundleState, trunk: TrunkBase | None) -> bool:
    """True when the trunk's graph file in the bundle holds every weight unchanged:
    the weights are then stored once, in the graph (a byte trunk)."""
    if spec_graph(state.trunk["spec"]) is None:
        return False
    return (trunk or build_trunk(state)).weights_in_graph()


def _save_data(state: BundleState, folder: Path) -> None:
    """Write each kept training set once (content-addressed); the ones no head uses any
    more go after the save (``collect_garbage``)."""
    wanted = {str(i["data"]) for i in state.heads.info.values() if i.get("data")}
    for rel in sorted(wanted):
        target = own_path(folder, rel)
        if target.exists():
            continue
        if rel not in state.data:
            source = None if state.path is None else state.path / rel
            if source is not None and source.is_file() and source.resolve() != target.resolve():
                atomic_write_bytes(target, source.read_bytes())
            continue
        write_kept_data(target, state.data[rel], _kept_base(state, folder, rel))


def _kept_base(state: BundleState, folder: Path, rel: str) -> tuple[Path, int] | None:
    """The longest kept set in memory, already in ``folder``, whose rows begin ``rel``'s
    (a head's rows before its last corrections): its file and rows."""
    data = state.data[rel]
    best: tuple[Path, int] | None = None
    for other, rows in state.data.items():
        if other == rel or (best is not None and len(rows[0]) <= best[1]):
            continue
        path = own_path(folder, other)
        if kept_prefix(rows, data) and path.is_file():
            best = (path, len(rows[0]))
    return best


def read_training_data(state: BundleState, name: str) -> KeptData | None:
    """The texts, labels and groups head ``name`` (a head of ``state``) was trained on,
    if the bundle kept them: from memory, else read from its folder and checked."""
    info = state.heads.info[name]
    rel = info.get("data")
    if not rel:
        return None
    if rel in state.data:
        return state.data[rel]
    path = None if state.path is None else own_path(state.path, rel)
    if path is None or not path.is_file():
        raise BundleError(
            f"the kept training data of head {name!r} ({rel}) is missing from "
            f"{state.path}; the head cannot be refitted (train it again)"
        )
    return read_kept_data(path, name, info.get("data_hash"))
