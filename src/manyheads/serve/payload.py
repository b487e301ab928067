"""One head as JSON: its record and its tensors (a base64 safetensors blob).

This is the body of ``PUT /v1/heads/{name}`` and of ``GET /v1/heads/{name}``,
and what ``manyheads heads export`` writes.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

from ..errors import DataError


def head_to_json(record: dict[str, Any], tensors: dict[str, np.ndarray]) -> dict[str, Any]:
    from safetensors.numpy import save

    blob = save({k: np.ascontiguousarray(v) for k, v in tensors.items()})
    return {"record": record, "tensors": base64.b64encode(blob).decode("ascii")}


def head_from_json(doc: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(record, tensors)`` from a head JSON document; DataError says what is wrong."""
    from safetensors.numpy import load

    if not isinstance(doc, dict):
        raise DataError("a head must be a JSON object with 'record' and 'tensors'")
    record, blob = doc.get("record"), doc.get("tensors")
    if not isinstance(record, dict):
        raise DataError("'record' must be the head's JSON record (an object)")
    if not isinstance(blob, str):
        raise DataError("'tensors' must be the head's safetensors file, base64-encoded")
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DataError(f"'tensors' is not valid base64: {exc}") from exc
    try:
        tensors = load(raw)
    except Exception as exc:  # safetensors raises several types for bad input
        raise DataError(f"'tensors' is not a safetensors file: {exc}") from exc
    # the bundle's own file names tensors heads/NAME/KEY; a head file names them KEY
    return record, {k.rsplit("/", 1)[-1]: v for k, v in tensors.items()}
