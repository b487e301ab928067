"""Labelling big files: streamed, resumable, bad rows kept aside (:func:`label_file`),
rows of an iterable (:func:`label_rows`); the same job on Ray Data for a cluster
(:mod:`manyheads.label.ray_engine`); :func:`label` runs either."""

from .engine import ENGINES, label
from .job import LabelSettings, LabelSummary, label_file
from .rows import Labeller, label_rows

__all__ = [
    "ENGINES",
    "LabelSettings",
    "LabelSummary",
    "Labeller",
    "label",
    "label_file",
    "label_rows",
]
