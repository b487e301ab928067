"""Choosing where a labelling job runs: here, in this process and ``workers`` others
(:func:`~manyheads.label.job.label_file`), or on Ray Data, on this machine or a cluster
(:func:`~manyheads.label.ray_engine.label_with_ray`)."""

from __future__ import annotations

import os
from typing import Unpack

from ..errors import ConfigError, one_of
from .job import LabelOptions, LabelSummary, label_file

__all__ = ["ENGINES", "label"]

ENGINES = ("local", "ray")


def label(
    input_path: str | os.PathLike[str],
    bundle_path: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    engine: str = "local",
    address: str | None = None,
    workers: int | None = None,
    progress: bool = False,
    **options: Unpack[LabelOptions],
) -> LabelSummary:
    """Label ``input_path`` into ``output`` with the ``engine`` asked for: ``"local"``
    (one output file; ``workers`` processes, default 1) or ``"ray"`` (an output folder;
    ``workers`` actors, default one per CPU; ``address``: a running cluster's, default a
    Ray started here). ``progress``: a progress bar on standard error."""
    one_of(engine, ENGINES, "engine")
    if engine == "ray":
        from .ray_engine import label_with_ray

        return label_with_ray(
            input_path, bundle_path, output, address=address, workers=workers,
            progress=progress, **options,
        )  # fmt: skip
    if address is not None:
        raise ConfigError("{address} is for the ray engine", options=("address",))
    return label_file(
        input_path, bundle_path, output, workers=1 if workers is None else workers,
        progress=progress, **options,
    )  # fmt: skip
