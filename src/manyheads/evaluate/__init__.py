"""Measuring heads: the metrics (accuracy, F1s, ECE) and scoring heads on labelled
rows. Needs scikit-learn; loading and predicting never import it."""

from .metrics import expected_calibration_error, head_metrics, per_label_f1

__all__ = ["expected_calibration_error", "head_metrics", "per_label_f1"]
