"""The trunk types a spec may name, and what is read from a spec without building it.

A spec (``bundle.json``'s ``trunk.spec``) is ``{"type": NAME, **settings}``. Each
type is a :class:`~manyheads.trunks.base.TrunkBase` subclass that declares, as class
attributes and class methods, its ``type_name``, its settings, how it is built from
them (``from_spec``), the files of the bundle folder it names (``spec_files``) and
its abilities (``tunable``, ``exported``, ``has_tiers``, ``keeps_files``). A new
trunk type is one module plus one line in :data:`TRUNK_TYPES` (or a call of
:func:`register_trunk_type`); the store, the exporter and fine-tuning ask the
type, never its name.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from .._io import HASHED_FILES
from ..errors import ConfigError, ManyheadsError
from .base import SpecFile, TrunkBase

__all__ = [
    "TRUNK_TYPES",
    "SpecFile",
    "check_spec",
    "hashed_file_kinds",
    "register_trunk_type",
    "replace_part_spec",
    "spec_files",
    "spec_graph",
    "spec_has_tiers",
    "spec_keeps_files",
    "spec_name",
    "spec_parts",
    "spec_tier",
    "spec_type",
    "trunk_from_spec",
    "trunk_type",
]

# a spec's "type" -> its class ("module:Class" in this package, imported on first use,
# so that scikit-learn, torch or onnxruntime load only for a trunk that needs them)
TRUNK_TYPES: dict[str, str | type[TrunkBase]] = {
    "minilm": "transformer:MiniLMTrunk",
    "hashing": "hashing:HashingTrunk",
    "ngram": "ngram:NgramTrunk",
    "static": "static:StaticTrunk",
    "transformer": "transformer:TransformerTrunk",
    "composite": "composite:CompositeTrunk",
    "onnx": "onnxrt:OnnxTrunk",
    "byte": "byte:ByteTrunk",
}


def register_trunk_type(cls: type[TrunkBase]) -> type[TrunkBase]:
    """Make specs of type ``cls.type_name`` build ``cls`` (usable as a class decorator);
    a name already taken by another class is refused."""
    name = getattr(cls, "type_name", "")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{cls.__name__} needs a type_name to be registered")
    if name in TRUNK_TYPES and trunk_type(name) is not cls:
        raise ConfigError(f"trunk type {name!r} is taken by {trunk_type(name).__name__}")
    TRUNK_TYPES[name] = cls
    return cls


def trunk_type(name: Any) -> type[TrunkBase]:
    """The class of trunk type ``name``; an unknown type is refused in one line."""
    entry = TRUNK_TYPES.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ManyheadsError(f"unknown trunk type {name!r}; known: {', '.join(TRUNK_TYPES)}")
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(f"{__package__}.{module}"), attr)
        assert isinstance(entry, type) and issubclass(entry, TrunkBase)
        TRUNK_TYPES[name] = entry
    return entry


def hashed_file_kinds() -> tuple[tuple[str, str], ...]:
    """The kinds of content-named files trunks write into a bundle folder: the built-in
    ones and those of every type registered as a class."""
    kinds = dict.fromkeys(HASHED_FILES)
    for entry in TRUNK_TYPES.values():
        if isinstance(entry, type):
            kinds.update(dict.fromkeys(entry.hashed_files))
    return tuple(kinds)


def _options(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k not in ("type", "version")}


def _type_of(spec: dict[str, Any]) -> type[TrunkBase] | None:
    kind = spec.get("type")
    return trunk_type(kind) if isinstance(kind, str) and kind in TRUNK_TYPES else None


_WHAT = {bool: "true or false", int: "an integer", float: "a number"}


def check_spec(spec: Any) -> dict[str, Any]:
    """Refuse (one line, :class:`ConfigError`) a trunk spec with unknown settings, or a
    setting whose value is not of its default's type; nothing is built or loaded.
    Returns the settings (the spec less ``type`` and ``version``)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"a trunk spec must be an object, got {spec!r}")
    kind = spec.get("type")
    options = _options(spec)
    cls = _type_of(spec)
    if cls is None:
        return options  # building it says that the type is unknown
    known = cls.spec_settings()
    if not set(options) <= known:
        unknown = ", ".join(repr(k) for k in sorted(set(options) - known))
        raise ConfigError(
            f"the {kind} trunk spec has unknown setting(s) {unknown}; known: "
            + ", ".join(sorted(known))
        )
    for key, default in cls.spec_defaults().items():
        value = options.get(key, default)
        expected: tuple[type, ...] = (float, int) if type(default) is float else (type(default),)
        bool_mixup = isinstance(value, bool) != isinstance(default, bool)
        if value is not None and (not isinstance(value, expected) or bool_mixup):
            raise ConfigError(
                f"the {kind} trunk spec has {key}={value!r}; expected "
                + _WHAT.get(type(default), "a string")
            )
    for part in cls.spec_parts(options):
        check_spec(part)
    return options


def trunk_from_spec(spec: dict[str, Any], base: Path | None = None) -> TrunkBase:
    """The trunk a spec describes (``base``: the bundle folder its files are in); a spec
    with unknown settings or values of the wrong type is refused with one line naming
    them."""
    options = check_spec(spec)
    kind = spec.get("type")
    cls = trunk_type(kind)
    try:
        return cls.from_spec(options, base)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        if isinstance(exc, ManyheadsError):
            raise
        raise ConfigError(f"bad {kind} trunk spec {options}: {exc}") from None


def spec_parts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The specs of a composite spec's parts; a plain spec is its own one part."""
    cls = _type_of(spec)
    parts = cls.spec_parts(_options(spec)) if cls is not None else []
    return [p for p in parts if isinstance(p, dict)] if parts else [spec]


def replace_part_spec(spec: dict[str, Any], index: int, part: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its part ``index`` (a plain spec: itself) replaced by ``part``."""
    cls = _type_of(spec)
    if cls is None or not cls.spec_parts(_options(spec)):
        return part
    parts = list(spec["parts"])
    parts[index] = part
    return {**spec, "parts": parts}


def spec_files(spec: dict[str, Any]) -> list[SpecFile]:
    """The files of the bundle folder a spec (and its parts) names, each with what it
    is and, where the spec must pin it, its SHA-256."""
    if not isinstance(spec, dict):
        raise ConfigError(f"a trunk spec must be an object, got {spec!r}")
    cls = _type_of(spec)
    if cls is None:
        return []
    options = _options(spec)
    return [*cls.spec_files(options), *(f for p in cls.spec_parts(options) for f in spec_files(p))]


def spec_tier(spec: dict[str, Any]) -> int | None:
    """The tier (nested embedding size) a spec of a trunk with tiers serves; ``None``
    for a trunk without tiers. Read from the spec, nothing built."""
    cls = _type_of(spec)
    tier = spec.get("tier") if cls is not None and cls.has_tiers else None
    return tier if isinstance(tier, int) and not isinstance(tier, bool) else None


def spec_has_tiers(spec: dict[str, Any]) -> bool:
    """Whether the trunk a spec describes has tiers (a byte trunk)."""
    cls = _type_of(spec)
    return cls is not None and cls.has_tiers


def spec_graph(spec: dict[str, Any]) -> tuple[str, str] | None:
    """``(file, sha256)`` of the graph a trunk with tiers keeps, the one its tiers
    share; ``None`` for other trunks, or one whose graph is not written yet."""
    if not spec_has_tiers(spec):
        return None
    files = [f for f in spec_files(spec) if f.pinned and f.path]
    return (str(files[0].path), str(files[0].sha256)) if files else None


def spec_keeps_files(spec: dict[str, Any]) -> bool:
    """Whether the trunk a spec describes (or one of its parts) keeps files in the
    bundle folder: a graph, a tokenizer. Saving such a bundle builds its trunk, to
    write them."""
    return any(cls.keeps_files for p in spec_parts(spec) if (cls := _type_of(p)) is not None)


def spec_type(spec: dict[str, Any]) -> str:
    """The kind of trunk a spec describes, as messages name it."""
    return str(spec.get("type"))


def spec_name(spec: dict[str, Any]) -> str | None:
    """The name a trunk spec is written as (``minilm+tfidf``; ``load_trunk`` builds the same
    spec from it); ``None`` for a spec no name gives (a model folder, a graph)."""
    cls = _type_of(spec)
    if cls is None:
        return None
    try:
        return cls.spec_name(_options(spec))
    except ConfigError:
        return None  # a bad spec has no name; building its trunk says what is wrong
