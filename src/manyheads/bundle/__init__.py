"""Bundles: one trunk reference plus named heads, saved as a folder.

``core`` (:class:`Bundle`: the head set, ``predict``, add / replace / remove a head,
saving and loading), ``state`` (the head set's immutable snapshot), ``format``
(``bundle.json``, tensors, kept data, as plain data), ``store`` (the folder: its
lock, what it may name, garbage), ``builtin`` (built-in bundles, tiers' folders,
copies), ``graph`` (an exported bundle's graph holding its heads), ``pieces``
(long texts read in pieces).
"""

from ..heads.kinds import check_head_name
from ..heads.record import HeadLimits
from .answer import vectors_seen
from .builtin import (
    BUILTIN_BUNDLES,
    builtin_root,
    bundle_folder,
    bundle_tiers,
    check_writable,
    copy_bundle,
)
from .core import Bundle
from .format import FORMAT_VERSION
from .pieces import split_text
from .store import BUNDLE_JSON, DATA_DIR, HEADS_FILE, TIERS_DIR, has_bundle

__all__ = [
    "BUILTIN_BUNDLES",
    "BUNDLE_JSON",
    "DATA_DIR",
    "FORMAT_VERSION",
    "HEADS_FILE",
    "TIERS_DIR",
    "Bundle",
    "HeadLimits",
    "builtin_root",
    "bundle_folder",
    "bundle_tiers",
    "check_head_name",
    "check_writable",
    "copy_bundle",
    "has_bundle",
    "split_text",
    "vectors_seen",
]
