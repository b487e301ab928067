"""Trunks turn texts into L2-normalised vectors.

``load_trunk`` accepts a name (``"minilm"``, ``"hashing"``), a path to a local
Hugging Face / sentence-transformers folder, a spec dict as stored in
``bundle.json``, or an object that already follows the :class:`Trunk` protocol.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ManyheadsError
from .base import Features, Trunk, TrunkAdapter, TrunkBase, l2_normalise
from .composite import CompositeTrunk, composite_name, encode_features
from .transformer import TransformerTrunk, minilm_path

if TYPE_CHECKING:
    from .hashing import HashingTrunk

__all__ = [
    "HASHING_PRESETS",
    "TRUNK_NAMES",
    "CompositeTrunk",
    "Features",
    "HashingTrunk",
    "TransformerTrunk",
    "Trunk",
    "TrunkAdapter",
    "TrunkBase",
    "check_spec",
    "encode_features",
    "l2_normalise",
    "load_trunk",
    "minilm_path",
    "spec_graph",
    "spec_has_tiers",
    "spec_keeps_files",
    "spec_name",
    "spec_tier",
    "spec_type",
]

from .presets import COMPOSITE_PRESETS, HASHING_PRESETS, TRUNK_NAMES


def __getattr__(name: str) -> Any:
    if name == "HashingTrunk":  # scikit-learn's hashing: imported on first use
        from .hashing import HashingTrunk

        return HashingTrunk
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _settings(cls: Any, skip: tuple[str, ...] = ()) -> set[str]:
    import inspect

    names = inspect.signature(cls.__init__).parameters
    return {n for n in names if n != "self" and n not in skip}


def _known_settings(kind: Any) -> set[str] | None:
    """The settings a spec of trunk type ``kind`` may hold (None: an unknown type)."""
    if kind == "composite":
        return {"parts", "weights"}
    if kind == "hashing":
        from .hashing import HashingTrunk

        return _settings(HashingTrunk)
    if kind == "byte":
        return {"config", "tier", "graph", "graph_sha256"}
    if kind == "ngram":
        from .ngram import NgramTrunk

        return _settings(NgramTrunk)
    if kind == "static":
        return {"source", "file", "sha256"}
    if kind == "minilm":
        return _settings(TransformerTrunk, ("path", "registered"))
    if kind == "transformer":
        return _settings(TransformerTrunk, ("registered",))
    if kind == "onnx":
        from .onnxrt import OnnxTrunk

        return _settings(OnnxTrunk, ("folder",))
    return None


def _defaults(kind: Any) -> dict[str, Any]:
    """The default of each setting of trunk type ``kind`` that has a plain one."""
    import inspect

    cls: Any = None
    if kind == "hashing":
        from .hashing import HashingTrunk

        cls = HashingTrunk
    elif kind == "ngram":
        from .ngram import NgramTrunk

        cls = NgramTrunk
    elif kind in ("minilm", "transformer"):
        cls = TransformerTrunk
    if cls is None:
        return {}
    params = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in params if isinstance(p.default, bool | int | float | str)}


def check_spec(spec: Any) -> dict[str, Any]:
    """Refuse (one line, :class:`ConfigError`) a trunk spec with unknown settings, or a
    setting whose value is not of its default's type; nothing is built or loaded.
    Returns the settings (the spec less ``type`` and ``version``)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"a trunk spec must be an object, got {spec!r}")
    kind = spec.get("type")
    options = {k: v for k, v in spec.items() if k not in ("type", "version")}
    known = _known_settings(kind)
    if known is not None and not set(options) <= known:
        unknown = ", ".join(repr(k) for k in sorted(set(options) - known))
        raise ConfigError(
            f"the {kind} trunk spec has unknown setting(s) {unknown}; known: "
            + ", ".join(sorted(known))
        )
    for key, default in _defaults(kind).items():
        value = options.get(key, default)
        expected: tuple[type, ...] = (float, int) if type(default) is float else (type(default),)
        bool_mixup = isinstance(value, bool) != isinstance(default, bool)
        if value is not None and (not isinstance(value, expected) or bool_mixup):
            what = {bool: "true or false", int: "an integer", float: "a number"}
            raise ConfigError(
                f"the {kind} trunk spec has {key}={value!r}; expected "
                + what.get(type(default), "a string")
            )
    if kind == "composite":
        parts = options.get("parts")
        if not isinstance(parts, list):
            raise ConfigError(f"a composite trunk spec needs a list of 'parts', got {parts!r}")
        for part in parts:
            check_spec(part)
    return options


def _spec_parts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    parts = spec.get("parts") if spec.get("type") == "composite" else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else [spec]


def spec_tier(spec: dict[str, Any]) -> int | None:
    """The tier (nested embedding size) a byte trunk spec serves; ``None`` for a trunk
    without tiers. Read from the spec, nothing built."""
    tier = spec.get("tier") if spec.get("type") == "byte" else None
    return tier if isinstance(tier, int) and not isinstance(tier, bool) else None


def spec_has_tiers(spec: dict[str, Any]) -> bool:
    """Whether the trunk a spec describes has tiers (a byte trunk)."""
    return spec.get("type") == "byte"


def spec_graph(spec: dict[str, Any]) -> tuple[str, str] | None:
    """``(file, sha256)`` of the graph a byte trunk spec names; ``None`` when it names
    none (not a byte trunk, or one whose graph is not written yet)."""
    if spec.get("type") != "byte" or not spec.get("graph"):
        return None
    return str(spec["graph"]), str(spec.get("graph_sha256"))


def spec_keeps_files(spec: dict[str, Any]) -> bool:
    """Whether the trunk a spec describes (or one of its parts) keeps files in the
    bundle folder: a graph, a tokenizer. Saving such a bundle builds its trunk, to
    write them."""
    return any(p.get("type") in ("byte", "onnx", "static") for p in _spec_parts(spec))


def spec_type(spec: dict[str, Any]) -> str:
    """The kind of trunk a spec describes, as messages name it."""
    return str(spec.get("type"))


def spec_name(spec: dict[str, Any]) -> str | None:
    """The name a trunk spec is written as (``minilm+tfidf``; ``load_trunk`` builds the same
    spec from it); ``None`` for a spec no name gives (a model folder, a graph)."""
    kind = spec.get("type")
    options = {k: v for k, v in spec.items() if k not in ("type", "version")}
    if kind == "minilm":
        return "minilm"
    if kind == "hashing":
        from .hashing import HashingTrunk

        try:
            return HashingTrunk(**options).name
        except ConfigError:
            return None  # a bad spec has no name; building its trunk says what is wrong
    if kind == "ngram":
        from .ngram import NgramTrunk

        try:
            return NgramTrunk(**_ngram_options(options)).name
        except ConfigError:
            return None
    if kind == "static":
        return "static" if options.get("source") == "minilm" else None
    if kind == "composite":
        names = [spec_name(p) for p in options.get("parts", [])]
        if any(n is None for n in names):
            return None
        name = composite_name([str(n) for n in names], options.get("weights"))
        return next((k for k, v in COMPOSITE_PRESETS.items() if v == name), name)
    return None


def _ngram_options(options: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in options.items() if k != "version"}
    if "ngram_range" in out:
        out["ngram_range"] = tuple(out["ngram_range"])
    return out


def _from_spec(spec: dict[str, Any], base: Path | None = None) -> TrunkBase:
    """The trunk a spec describes; a spec with unknown settings or values of the wrong
    type is refused with one line naming them."""
    options = check_spec(spec)
    kind = spec.get("type")
    try:
        return _build(kind, options, base)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        if isinstance(exc, ManyheadsError):
            raise
        raise ConfigError(f"bad {kind} trunk spec {options}: {exc}") from None


def _build(kind: Any, options: dict[str, Any], base: Path | None) -> TrunkBase:
    if kind == "composite":
        parts = options.get("parts")
        if not isinstance(parts, list):
            raise ConfigError(f"a composite trunk spec needs a list of 'parts', got {parts!r}")
        return CompositeTrunk([_from_spec(p, base) for p in parts], options.get("weights"))
    if kind == "hashing":
        from .hashing import HashingTrunk

        if "ngram_range" in options:
            options["ngram_range"] = tuple(options["ngram_range"])
        return HashingTrunk(**options)
    if kind == "ngram":
        from .ngram import NgramTrunk

        return NgramTrunk(**_ngram_options(options))
    if kind == "static":
        return _static_from_spec(options, base)
    if kind == "byte":
        from .byte import ByteTrunk

        return ByteTrunk(
            options.get("config"),
            tier=options.get("tier"),
            graph=options.get("graph"),
            graph_sha256=options.get("graph_sha256"),
            folder=base,
        )
    if kind == "minilm":
        return TransformerTrunk(minilm_path(), name="minilm", registered=True, **options)
    if kind == "onnx":
        if base is None:
            raise ManyheadsError("an ONNX trunk is loaded from its bundle folder (Bundle.load)")
        from .onnxrt import OnnxTrunk

        return OnnxTrunk(base, **options)
    if kind == "transformer":
        path = options.pop("path", None)
        if not path:
            raise ManyheadsError("a transformer trunk spec needs a 'path'")
        folder = Path(path)
        if not folder.is_absolute() and base is not None:
            folder = base / folder  # a trunk stored inside the bundle folder
        return TransformerTrunk(folder, **options)
    raise ManyheadsError(
        f"unknown trunk type {kind!r}; known: minilm, hashing, ngram, static, transformer, "
        "composite, onnx, byte"
    )


def _static_from_spec(options: dict[str, Any], base: Path | None) -> TrunkBase:
    """A static trunk from its table file in the bundle folder; a spec without a file
    (a bundle never saved) distils again, from its source."""
    from .static import StaticTrunk, static_trunk

    source = str(options.get("source") or "minilm")
    file = options.get("file")
    if file is None:
        return static_trunk(None if source == "minilm" else source)
    if base is None:
        raise ManyheadsError("a static trunk with a table file is loaded from its bundle folder")
    return StaticTrunk.from_file(base, str(file), options.get("sha256"), source=source)


def load_trunk(
    trunk: str | Path | dict[str, Any] | Trunk,
    *,
    state: dict[str, Any] | None = None,
    base: Path | None = None,
) -> TrunkBase:
    """Build a trunk from a name, a folder path, a spec dict, or return a trunk as is.

    Names: ``minilm``, ``hashing``, ``tfidf``, ``ngram``, ``static`` (``static:PATH``),
    ``fast`` (``static+ngram``), a model folder path, or several
    of these joined by ``+`` (a composite trunk), each optionally followed by
    ``@WEIGHT`` (``minilm@1+tfidf@0.5``). ``state`` holds fitted arrays (the
    idf of a hashing part) as saved in a bundle; ``base`` is the folder that
    relative model paths in a spec are relative to (the bundle's).
    """
    if isinstance(trunk, dict):
        built = _from_spec(trunk, base)
    elif isinstance(trunk, Path | str):
        built = _from_name(str(trunk))
    elif isinstance(trunk, TrunkBase):
        return trunk
    elif isinstance(trunk, Trunk):
        return TrunkAdapter(trunk)
    else:
        raise TypeError(
            f"trunk must be a name, a path, a spec dict or a Trunk, got {type(trunk)!r}"
        )
    if state:
        built.load_state(state)
    return built


def _from_name(name: str) -> TrunkBase:
    if "+" in name and not Path(name).expanduser().is_dir():
        parts, weights = [], []
        for piece in name.split("+"):
            base, _, weight = piece.strip().partition("@")
            if not base:
                raise ManyheadsError(f"bad trunk {name!r}: empty part between '+'")
            try:
                weights.append(float(weight) if weight else 1.0)
            except ValueError:
                raise ManyheadsError(
                    f"bad trunk {name!r}: weight {weight!r} of part {base!r} is not a number"
                ) from None
            parts.append(_from_name(base))
        return CompositeTrunk(parts, weights)
    if name in COMPOSITE_PRESETS:
        return _from_name(COMPOSITE_PRESETS[name])
    if name == "minilm":
        return _from_spec({"type": "minilm"})
    if name == "ngram":
        from .ngram import NgramTrunk

        return NgramTrunk()
    if name == "static" or name.startswith("static:"):
        from .static import static_trunk

        return static_trunk(name.partition(":")[2] or None)
    if name in HASHING_PRESETS:
        from .hashing import HashingTrunk

        return HashingTrunk(**HASHING_PRESETS[name])
    path = Path(name).expanduser()
    if path.is_dir():
        return TransformerTrunk(path)
    if name == "byte":
        raise ManyheadsError(
            "a byte trunk is trained on labelled texts, not loaded by name: use "
            "train_byte_trunk, or `manyheads train DATA -b NEW_BUNDLE --trunk byte`"
        )
    raise ManyheadsError(
        f"unknown trunk {name!r}: give one of {', '.join(TRUNK_NAMES)}, the path of a local "
        "model folder, or several joined by '+'"
    )
