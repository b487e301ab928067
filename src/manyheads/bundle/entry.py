"""A head on its way into a bundle: checked against the bundle's trunk and caps and made
into the record and info the bundle stores (:func:`head_entry`), or built from a record
another bundle exported (:func:`head_from_export`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ..errors import DataError, FingerprintMismatchError
from ..heads import AnyHead, any_head_from_record, any_head_to_record, check_head_name
from ..heads.head_types import head_type
from ..heads.record import HeadLimits, check_info, check_label_values
from .format import record_and_info
from .state import Record

__all__ = ["head_entry", "head_from_export"]


def head_entry(
    name: str,
    head: AnyHead,
    info: dict[str, Any] | None,
    trunk: Mapping[str, Any],
    limits: HeadLimits,
) -> tuple[str, Record, dict[str, Any]]:
    """``(name, record, info)`` of a fitted head for a bundle on ``trunk`` (its trunk
    reference): refused in one line when it is not fitted, was trained on another
    trunk, expects other vectors, or breaks ``limits``' caps on labels."""
    from ..heads.base import HeadBase
    from ..heads.tree_fit import TreeHead

    name = check_head_name(name)
    if not isinstance(head, HeadBase | TreeHead) or not head.fitted:
        raise DataError(f"head {name!r} must be a fitted LinearHead, MLPHead or TreeHead")
    info = dict(info or {})
    ours = str(trunk["fingerprint"])
    fp = info.setdefault("trunk_fingerprint", ours)
    if fp != ours:
        raise FingerprintMismatchError(
            f"head {name!r} was trained on trunk fingerprint {fp}, but this bundle's "
            f"trunk {trunk['name']!r} has fingerprint {ours}"
        )
    if head.n_features_in_ != int(trunk["dim"]):
        raise FingerprintMismatchError(
            f"head {name!r} expects {head.n_features_in_}-d embeddings, "
            f"the trunk gives {int(trunk['dim'])}-d"
        )
    info.setdefault("kind", head.kind)
    info.setdefault("field", name)
    info.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
    where = f"head {name!r}"
    info = check_info(info, where)
    record = any_head_to_record(head)
    check_label_values(record[0].get("labels"), where)
    htype = head_type(record[0].get("type", "linear"))
    limits.check_labels(record[0]["labels"], where, extreme=htype.extreme)
    if isinstance(head, TreeHead):
        limits.check_tree(
            len(record[0]["labels"]), head.n_features_in_, head.precision, where, len(head.trees_)
        )
    return name, record, info


def head_from_export(
    name: str, record: Any, tensors: dict[str, np.ndarray]
) -> tuple[str, AnyHead, dict[str, Any]]:
    """``(name, head, info)`` from an exported head's record and tensors; a head from
    elsewhere brings no kept training data, history or corrections."""
    name = check_head_name(name)
    if not isinstance(record, dict):
        raise DataError(f"head {name!r}: the record must be an object")
    if "trunk_fingerprint" not in record:
        raise DataError(f"head {name!r} record lacks 'trunk_fingerprint'")
    try:
        head = any_head_from_record(record, tensors)
    except DataError as exc:
        raise DataError(f"head {name!r}: {exc}") from None
    # what belongs to the folder it came from: its kept data, earlier generations and
    # the corrections it used
    own = ("data", "history", "feedback", "generation")
    info = {k: v for k, v in record_and_info(record).items() if k not in own}
    info["kind"] = head.kind
    return name, head, info
