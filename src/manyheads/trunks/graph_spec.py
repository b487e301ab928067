"""What an exported graph's trunk spec describes (:class:`GraphSpec`), checked when
made; :class:`~manyheads.trunks.onnxrt.OnnxTrunk` runs it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .._settings import Rule, Settings
from ..errors import ConfigError
from .windows import OVERFLOW

__all__ = ["RUN_SETTINGS", "GraphSpec", "check_recheck"]

# the settings of an ONNX trunk spec that say how calls run, not what the graph is
RUN_SETTINGS = ("threads", "batch_tokens", "max_batch")


def check_recheck(recheck: Any, quantization: str | None) -> dict[str, Any] | None:
    """``recheck`` of an ONNX trunk spec, checked (one-line refusals)."""
    if recheck is None:
        return None
    where = "the ONNX trunk's recheck"
    if quantization != "int8":
        raise ConfigError(f"{where} belongs to an int8 graph, this one is {quantization}")
    if not isinstance(recheck, dict) or set(recheck) != {"file", "sha256", "quantile", "heads"}:
        raise ConfigError(
            f"{where} must be an object with file, sha256, quantile and heads, got {recheck!r}"
        )
    for key in ("file", "sha256"):
        if not isinstance(recheck[key], str) or not recheck[key]:
            raise ConfigError(f"{where} {key} must be a non-empty string, got {recheck[key]!r}")
    q = recheck["quantile"]
    if isinstance(q, bool) or not isinstance(q, int | float) or not 0 <= q <= 1:
        raise ConfigError(f"{where} quantile must be a number from 0 to 1, got {q!r}")
    heads = recheck["heads"]
    if not isinstance(heads, dict):
        raise ConfigError(f"{where} heads must be an object, got {heads!r}")
    for name, entry in heads.items():
        margin = entry.get("margin") if isinstance(entry, dict) else None
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("digest"), str)
            or isinstance(margin, bool)
            or not isinstance(margin, int | float)
            or not margin >= 0
        ):
            raise ConfigError(
                f"{where} of head {name!r} must be {{digest: text, margin: a number >= 0}}, "
                f"got {entry!r}"
            )
    return recheck


def _max_length(value: Any) -> bool:
    return isinstance(value, int) and value >= 4


@dataclass(frozen=True)
class GraphSpec(Settings):
    """An exported graph as its bundle's trunk spec describes it (the settings of the
    spec but how calls run: ``threads``, ``batch_tokens``, ``max_batch``).

    ``fingerprint`` and ``dim``: the trunk the graph was exported from and the width of
    its vectors; ``max_length``: the tokens of a window; ``overflow``: what a longer
    text is (``windows``: read whole, ``truncate``: its first window); ``name``: the source trunk's
    name; ``file``, ``tokenizer``: the graph and the tokenizer, relative to the bundle
    folder; ``sha256``: the graph file's; ``quantization``: None or ``"int8"``;
    ``source``: the spec of the trunk it was exported from; ``recheck``: an int8
    graph's float twin and each head's margin (see
    :class:`~manyheads.trunks.onnxrt.OnnxTrunk`).
    """

    fingerprint: str
    dim: int
    max_length: int
    name: str = "onnx"
    file: str = "model.onnx"
    tokenizer: str = "tokenizer.json"
    sha256: str | None = None
    quantization: str | None = None
    source: dict[str, Any] | None = None
    recheck: dict[str, Any] | None = None
    overflow: str = "windows"

    _constraints: ClassVar[Mapping[str, Rule]] = {
        "max_length": Rule(_max_length, "an integer >= 4"),
        "overflow": Rule(lambda v: v in OVERFLOW, "one of " + ", ".join(OVERFLOW)),
        "quantization": Rule(lambda v: v is None or v == "int8", "None or 'int8'"),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        check_recheck(self.recheck, self.quantization)
