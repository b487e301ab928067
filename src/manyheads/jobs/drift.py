"""Each head's drift over a file: the job behind ``manyheads drift`` and ``label --drift``.

The file is either texts to answer (a table's text field, or a plain file with one
text per line), or what ``manyheads label`` wrote (JSONL with each head's answer
object, or CSV / TSV / Parquet with ``HEAD`` and ``HEAD_score`` columns), whose
answers are read as they are, without the trunk. Every row makes the window unless
``settings.window`` keeps only the last ones. Texts answered now give each head's
inputs' row as well (their trunk vectors against the head's reference); answers read
from a file cannot.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bundle import vectors_seen
from ..data import read_records
from ..data.tables import readable
from ..errors import ConfigError, DataError
from ..learn.drift import DriftSettings, DriftWindow
from .options import open_bundle
from .predict import predict_rows

__all__ = ["DriftReport", "drift_file"]

_LISTED = {"multilabel", "hierarchical"}


@dataclass(frozen=True)
class DriftReport:
    """What :func:`drift_file` found: where the answers came from (``"labelled"``: a
    ``label`` output read as it is; ``"texts"``: answered now), the rows read, each
    head's row of the drift table, and whether any head alarms."""

    source: str
    rows: int
    heads: dict[str, dict[str, Any]]

    @property
    def alarm(self) -> bool:
        return any(row["alarm"] for row in self.heads.values())

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "rows": self.rows, "alarm": self.alarm, "heads": self.heads}


def _labelled_as(record: Mapping[str, Any], heads: Sequence[str]) -> str | None:
    """How a ``label`` output row holds the answers of ``heads``: ``"objects"`` (JSONL),
    ``"flat"`` (``HEAD`` and ``HEAD_score`` cells), or None (not a labelled row)."""
    if all(isinstance(record.get(h), dict) and ({"label", "labels"} & record[h].keys())
           for h in heads):  # fmt: skip
        return "objects"
    if all(h in record and f"{h}_score" in record for h in heads):
        return "flat"
    return None


def _cell(value: Any) -> Any:
    """A flat cell as a value: CSV writes lists as JSON text and nothing as ``""``."""
    if isinstance(value, str) and value[:1] == "[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return None if value == "" else value


def _flat_answer(label: Any, score: Any, listed: bool, where: str) -> dict[str, Any] | None:
    label, score = _cell(label), _cell(score)
    try:
        if listed:
            if label is None:
                return None
            labels = [str(v) for v in label] if isinstance(label, list) else [str(label)]
            scores = score if isinstance(score, list) else [score]
            kept = {lab: float(s) for lab, s in zip(labels, scores, strict=False) if s is not None}
            return {"labels": labels, "scores": kept}
        if label is None and score is None:
            return None
        return {"label": label, "score": None if score is None else float(score)}
    except (TypeError, ValueError):
        raise DataError(f"{where}: a score that is not a number: {score!r}") from None


def _labelled_answers(
    path: Path, heads: Sequence[str], kinds: Mapping[str, Any], how: str
) -> Iterator[dict[str, Any]]:
    """The answers of ``heads`` in a ``label`` output; a bad row (no answers) skipped."""
    columns = [c for h in heads for c in (h, f"{h}_score")]
    for where, record in read_records(path, columns=columns):
        if how == "objects":
            answer = {h: record.get(h) for h in heads}
        else:
            answer = {
                h: _flat_answer(record.get(h), record.get(f"{h}_score"), kinds[h] in _LISTED, where)
                for h in heads
            }
        if all(a is None for a in answer.values()):
            continue  # a row that could not be labelled
        if how == "objects" and any(not isinstance(a, dict) for a in answer.values()):
            raise DataError(f"{where}: not an answer of every head (a file mixing rows?)")
        yield answer


def _labelled(path: Path, heads: Sequence[str]) -> str | None:
    """How ``path`` holds the answers of ``heads`` (:func:`_labelled_as`), judged on its
    first row that is not a bad row of a ``label`` output; None: texts to answer."""
    if not readable(path.name) and not path.is_dir():
        return None  # a plain file of texts
    rows = 0
    for _, record in read_records(path):
        rows += 1
        if all(h in record and record[h] in (None, "") for h in heads) and rows < 100:
            continue  # a row a label job could not answer: the next one says
        return _labelled_as(record, heads)
    if not rows:
        raise DataError(f"{path}: no rows")
    return None


def _observe_vectors(window: DriftWindow, seen: list[Any]) -> None:
    for X in seen:
        window.observe_vectors(X)
    seen.clear()


def drift_file(
    bundle_path: str | Path,
    input_file: str | Path,
    *,
    text_field: str = "text",
    heads: Sequence[str] | None = None,
    batch_size: int = 256,
    tier: int | None = None,
    max_chars: int = 100_000,
    long_texts: str = "refuse",
    settings: DriftSettings | None = None,
) -> DriftReport:
    """The drift of each head (or of ``heads``) of the bundle over the rows of
    ``input_file``: a ``label`` output is read as it is, other files are answered
    (``text_field``, ``batch_size``, ``tier``, ``max_chars``, ``long_texts``: as
    :func:`~manyheads.jobs.predict_rows` takes them). ``settings``: a
    :class:`~manyheads.learn.drift.DriftSettings` (default: every row, the default
    alarm thresholds)."""
    if settings is None:
        settings = DriftSettings(window=None)
    elif not isinstance(settings, DriftSettings):
        raise ConfigError(f"settings must be DriftSettings, got {type(settings).__name__}")
    path = Path(input_file)
    if not path.exists():
        raise DataError(f"cannot read {path}: no such file or folder")
    bundle = open_bundle(bundle_path, no_cache=True, tier=tier)
    names = list(bundle.resolve_heads(heads))
    info = {name: bundle.head_info[name] for name in names}
    how = _labelled(path, names)
    window = DriftWindow(settings)
    window.follow(info)
    rows = 0
    if how is not None:
        kinds = {name: info[name].get("kind") for name in names}
        answers: Iterator[dict[str, Any]] = _labelled_answers(path, names, kinds, how)
    else:
        found = predict_rows(
            bundle_path, input_file=path, text_field=text_field, heads=names,
            batch_size=batch_size, tier=tier, max_chars=max_chars, long_texts=long_texts,
            scores="top",
        )  # fmt: skip
        answers = (answer for _, answer in found)
    batch: list[dict[str, Any]] = []
    with vectors_seen() as seen:  # the texts answered now: their vectors too
        for answer in answers:
            batch.append(answer)
            if len(batch) >= 1024:
                window.observe(batch)
                rows, batch = rows + len(batch), []
                _observe_vectors(window, seen)
        window.observe(batch)
        rows += len(batch)
        _observe_vectors(window, seen)
    if not rows:
        raise DataError(f"{path}: no answered rows")
    return DriftReport("labelled" if how else "texts", rows, window.report(info))
