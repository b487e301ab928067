"""Evaluating a bundle's heads on labelled texts, by one of the protocols."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from ..errors import require
from . import holdout, protocols

if TYPE_CHECKING:
    from typing import Unpack

__all__ = ["EvaluateOptions", "evaluate_bundle"]


class EvaluateOptions(protocols.ProtocolOptions, total=False):
    """How :func:`evaluate_bundle` (``Bundle.evaluate``) scores: the protocol
    (``"holdout"``, default; ``"mteb"``; ``"kfold"``), a folder for holdout's report,
    a progress bar, and the protocols' own settings."""

    protocol: str
    report: str | os.PathLike[str] | None
    progress: bool


def evaluate_bundle(
    bundle: Any,
    texts: Sequence[str],
    labels: Mapping[str, Sequence[Any]],
    **options: Unpack[EvaluateOptions],
) -> dict[str, dict[str, Any]]:
    """Metrics of each of ``bundle``'s heads named in ``labels`` on these texts (one trunk
    pass for all): ``protocol="holdout"`` scores the heads themselves
    (:func:`~manyheads.evaluate.holdout.evaluate_heads`; ``report``: a folder for
    ``report.html`` / ``report.json``); ``"mteb"`` and ``"kfold"`` fit fresh heads like
    them (:mod:`~manyheads.evaluate.protocols`, which says the options)."""
    protocol = options.pop("protocol", "holdout")
    report = options.pop("report", None)
    progress = options.pop("progress", False)
    names = bundle.resolve_heads(list(labels))
    heads = {n: bundle.heads[n] for n in names}
    protocols.check_protocol(protocol, [k for k, v in options.items() if v is not None], report)
    protocols.check_values({n: h.kind for n, h in heads.items()}, len(texts), options)
    if report is not None:
        require("matplotlib", "report")  # before the trunk pass
    embed = partial(bundle.embed, progress=progress)
    if protocol != "holdout":
        return protocols.evaluate_with(
            protocol, heads, embed, texts, labels, options, progress=progress
        )
    return holdout.evaluate_heads(heads, embed(texts), labels, report=report)
