"""Choosing where a labelling job runs: here, in this process and ``workers`` others
(:func:`~manyheads.label.job.label_file`), or on Ray Data, on this machine or a cluster
(:func:`~manyheads.label.ray_engine.label_with_ray`)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ConfigError, one_of
from .job import LabelSettings, LabelSummary, label_file

__all__ = ["ENGINES", "label"]

ENGINES = ("local", "ray")


def label(
    input_path: str | os.PathLike[str],
    bundle_path: str | os.PathLike[str],
    output: str | os.PathLike[str],
    settings: LabelSettings | None = None,
    *,
    engine: str = "local",
    address: str | None = None,
    workers: int | None = None,
    progress: bool = False,
    **options: Any,
) -> LabelSummary:
    """Label ``input_path`` into ``output`` with the ``engine`` asked for: ``"local"``
    (one output file; ``workers`` processes, default 1) or ``"ray"`` (an output folder;
    ``workers`` actors, default one per CPU; ``address``: a running cluster's, default a
    Ray started here). ``progress``: a progress bar on standard error. ``settings``
    (a :class:`~manyheads.label.rows.LabelSettings`), with ``options`` over it: what
    the job does with each row, the same on either engine."""
    one_of(engine, ENGINES, "engine")
    settings = LabelSettings.merged(settings, options, "label")
    if engine == "ray":
        from .ray_engine import label_with_ray

        return label_with_ray(
            input_path, bundle_path, output, settings, address=address, workers=workers,
            progress=progress,
        )  # fmt: skip
    if address is not None:
        raise ConfigError("{address} is for the ray engine", options=("address",))
    return label_file(
        input_path, bundle_path, output, settings, workers=1 if workers is None else workers,
        progress=progress,
    )  # fmt: skip
