"""A bundle in production from the command line: keeping a file's corrections, updating
heads from them, listing and rolling back a head's generations (the jobs behind
``manyheads feedback``, ``update``, ``heads history`` and ``heads rollback``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..bundle import check_writable
from ..data.dataset import LabelSpec, load_dataset
from ..errors import DataError
from .options import open_bundle, parse_task

if TYPE_CHECKING:
    from ..learn.update import UpdateReport

__all__ = ["feedback_file", "head_history", "rollback_head", "update_bundle"]


def _specs(bundle: Any, tasks: Sequence[str]) -> list[LabelSpec]:
    """The heads a file's corrections are read for: ``tasks`` (``NAME[=FIELD]``), or
    every head of the bundle, each from its own field."""
    if tasks:
        names = [parse_task(t) for t in tasks]
        for t in names:
            if t.name not in bundle.heads:
                raise bundle._unknown(t.name)
        pairs = [
            (t.name, t.field if "=" in raw else None) for t, raw in zip(names, tasks, strict=True)
        ]
    else:
        pairs = [(n, None) for n in bundle.heads]
    specs = []
    for name, fld in pairs:
        info = bundle.head_info[name]
        specs.append(LabelSpec(name, fld or str(info.get("field") or name), str(info["kind"])))
    return specs


def feedback_file(
    data: str | Path,
    bundle_path: str | Path,
    tasks: Sequence[str] = (),
    *,
    text_field: str = "text",
    label_sep: str = ",",
) -> dict[str, int]:
    """Keep the corrections of the file ``data`` with the bundle: each row's text and a
    label for any of the heads (a row without a head's field, or with null there, has
    no correction for it); the rows kept per head. Every row is read and checked
    before any is kept."""
    bundle = open_bundle(bundle_path, no_cache=True)
    assert bundle.path is not None
    check_writable(bundle.path)
    if not bundle.heads:
        raise DataError(f"{bundle_path}: the bundle has no heads to correct")
    specs = _specs(bundle, tasks)
    found = load_dataset(
        data, text_field=text_field, labels=specs, label_sep=label_sep, partial=True
    )
    labels = {n: v for n, v in found.labels.items() if n not in found.missing}
    if not labels:
        fields = ", ".join(f"{s.field!r} ({s.name})" for s in specs)
        raise DataError(f"{data}: no field of the bundle's heads; looked for {fields}")
    return bundle.add_feedback(found.texts, labels)


def update_bundle(
    bundle_path: str | Path,
    heads: Sequence[str] | str | None = None,
    *,
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
    **options: Any,
) -> UpdateReport:
    """Update the bundle's heads from their corrections (:meth:`Bundle.update_heads`,
    whose options these are) and save it."""
    bundle = open_bundle(bundle_path, cache_dir=cache_dir, no_cache=no_cache)
    assert bundle.path is not None
    check_writable(bundle.path)
    return bundle.update_heads(heads or None, **options)


def head_history(bundle_path: str | Path, name: str) -> list[dict[str, Any]]:
    """Head ``name``'s generations, the current one first."""
    return open_bundle(bundle_path, no_cache=True).head_history(name)


def rollback_head(bundle_path: str | Path, name: str, to: int | None = None) -> int:
    """Roll head ``name`` back to generation ``to`` (default: the previous one)."""
    bundle = open_bundle(bundle_path, no_cache=True)
    assert bundle.path is not None
    check_writable(bundle.path)
    return bundle.rollback_head(name, to)
