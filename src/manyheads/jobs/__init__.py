"""Jobs on files and folders: train heads from a file, fine-tune, absorb teachers,
evaluate, diagnose trunks and teachers, predict a file, measure each head's drift,
list and remove heads, export; keep corrections, update heads from them, list and roll
back a head's generations; make heads from label names, show and relabel them.
Each takes paths and plain options, calls the library and returns data; none prints.
The command line parses, calls one of these, and prints (:mod:`manyheads.cli`); what
the jobs take, and their defaults, are in :mod:`manyheads.jobs.options`."""

from .absorb import absorb_file
from .diagnose import diagnose_file
from .drift import DriftReport, drift_file
from .evaluate import evaluate_file
from .heads import export_file, list_heads, remove_head
from .learn import feedback_file, head_history, rollback_head, update_bundle
from .named import add_named_head, relabel, show_head
from .options import DEFAULT_BUNDLE, cache_setting
from .predict import predict_rows, predict_texts
from .train import finetune_file, train_file, train_report

__all__ = [
    "DEFAULT_BUNDLE",
    "DriftReport",
    "absorb_file",
    "add_named_head",
    "cache_setting",
    "diagnose_file",
    "drift_file",
    "evaluate_file",
    "export_file",
    "feedback_file",
    "finetune_file",
    "head_history",
    "list_heads",
    "predict_rows",
    "predict_texts",
    "relabel",
    "remove_head",
    "rollback_head",
    "show_head",
    "train_file",
    "train_report",
    "update_bundle",
]
