"""Data in: the one reader of tables (:mod:`~manyheads.data.tables`: JSONL, CSV, TSV,
Parquet, a file or a folder; bad rows with their reason), labelled texts read strictly
on top of it (:mod:`~manyheads.data.dataset`), and splits, groups and the hash of a
training set (:mod:`~manyheads.data.split`)."""

from __future__ import annotations

from .dataset import (
    LIST_KINDS,
    Dataset,
    LabelSpec,
    iter_texts,
    load_dataset,
    read_records,
    read_texts,
)
from .split import check_groups, data_hash, split_indices

__all__ = [
    "LIST_KINDS",
    "Dataset",
    "LabelSpec",
    "check_groups",
    "data_hash",
    "iter_texts",
    "load_dataset",
    "read_records",
    "read_texts",
    "split_indices",
]
