"""File-level operations behind the CLI: train, evaluate, predict, list and remove heads.

Each function takes paths and plain options, calls the library, and returns
data; none prints. The CLI only parses, calls one of these, and prints.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._progress import progress_bar
from .bundle import (
    BUNDLE_JSON,
    HEAD_TYPES,
    Bundle,
    FinetuneSummary,
    HeadSummary,
    check_head_name,
)
from .cache import EmbeddingCache
from .data import Dataset, LabelSpec, load_dataset, read_texts
from .errors import BundleError, ConfigError, DataError
from .heads import KINDS
from .trunks import load_trunk

__all__ = [
    "TaskSpec",
    "evaluate_file",
    "export_file",
    "finetune_file",
    "list_heads",
    "open_bundle",
    "parse_task",
    "predict_texts",
    "remove_head",
    "train_file",
]


# The defaults of `manyheads train`, chosen from bench/quality.py (see the README):
# MiniLM joined with a TF-IDF-like hashing trunk, C picked on the validation split,
# thresholds that maximise accuracy.
DEFAULT_TRUNK = "minilm+tfidf"


@dataclass(frozen=True)
class TaskSpec:
    """``NAME[=FIELD][:KIND]`` from the command line."""

    name: str
    field: str
    kind: str

    def label_spec(self) -> LabelSpec:
        return LabelSpec(name=self.name, field=self.field, kind=self.kind)


def parse_task(spec: str) -> TaskSpec:
    """Parse ``NAME``, ``NAME:KIND``, ``NAME=FIELD`` or ``NAME=FIELD:KIND``."""
    text = spec.strip()
    kind = "multiclass"
    if ":" in text:
        text, kind = text.rsplit(":", 1)
        if kind not in KINDS:
            raise ConfigError(
                f"bad --task {spec!r}: unknown kind {kind!r} (use {', '.join(KINDS)})"
            )
    name, _, fld = text.partition("=")
    if not name or ("=" in text and not fld):
        raise ConfigError(f"bad --task {spec!r}: expected NAME[=FIELD][:{'|'.join(KINDS)}]")
    try:
        check_head_name(name)
    except DataError as exc:
        raise ConfigError(f"bad --task {spec!r}: {exc}") from exc
    return TaskSpec(name=name, field=fld or name, kind=kind)


def _task_specs(tasks: Sequence[str | TaskSpec]) -> list[TaskSpec]:
    specs = [t if isinstance(t, TaskSpec) else parse_task(t) for t in tasks]
    if not specs:
        raise ConfigError("give at least one --task NAME[:KIND]")
    return specs


def _read_tasks(
    data: str | Path,
    specs: Sequence[TaskSpec],
    text_field: str,
    group_field: str | None,
    label_sep: str,
) -> Dataset:
    """Read and validate the file holding the texts and every task's labels."""
    return load_dataset(
        data,
        text_field=text_field,
        labels=[s.label_spec() for s in specs],
        group_field=group_field,
        label_sep=label_sep,
    )


def parse_C(value: float | str) -> float | str:
    """A positive number or ``"auto"`` (from the command line, both arrive as text)."""
    if value == "auto":
        return "auto"
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"--C must be a positive number or 'auto', got {value!r}") from None
    if not number > 0:
        raise ConfigError(f"--C must be a positive number or 'auto', got {value!r}")
    return number


def _cache_arg(cache_dir: str | Path | None, no_cache: bool) -> Any:
    if no_cache:
        return None
    if cache_dir is not None:
        return EmbeddingCache(Path(cache_dir) / "embeddings.sqlite")
    return "default"


def open_bundle(
    path: str | Path, *, cache_dir: str | Path | None = None, no_cache: bool = False
) -> Bundle:
    return Bundle.load(path, cache=_cache_arg(cache_dir, no_cache))


def train_file(
    data: str | Path,
    bundle_path: str | Path,
    tasks: Sequence[str | TaskSpec],
    *,
    trunk: str | None = None,
    text_field: str = "text",
    group_field: str | None = None,
    label_sep: str = ",",
    val_fraction: float = 0.2,
    C: float | str = "auto",
    class_weight: str | None = None,
    head: str = "linear",
    thresholds: str = "accuracy",
    seed: int = 0,
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
    progress: bool = False,
) -> list[HeadSummary]:
    """Train the named heads from a file into a bundle folder (created if missing).

    The whole file is read and validated, and every head trained, before
    anything is written; the bundle is then saved once, atomically.
    """
    specs = _task_specs(tasks)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"--task names must be unique, got {names}")
    C = parse_C(C)
    if thresholds not in ("f1", "accuracy"):
        raise ConfigError(f"--thresholds must be f1 or accuracy, got {thresholds!r}")
    if head not in HEAD_TYPES:
        raise ConfigError(f"--head must be one of {', '.join(HEAD_TYPES)}, got {head!r}")
    if class_weight not in (None, "balanced"):
        raise ConfigError(f"--class-weight must be 'balanced', got {class_weight!r}")
    dataset = _read_tasks(data, specs, text_field, group_field, label_sep)
    cache = _cache_arg(cache_dir, no_cache)
    folder = Path(bundle_path)
    if (folder / BUNDLE_JSON).is_file():
        bundle = Bundle.load(folder, cache=cache)
        if trunk is not None:
            wanted = load_trunk(trunk)
            if wanted.fingerprint != bundle.trunk_fingerprint:
                raise ConfigError(
                    f"bundle {folder} uses trunk {bundle.trunk_name!r} (fingerprint "
                    f"{bundle.trunk_fingerprint}); --trunk {trunk!r} has fingerprint "
                    f"{wanted.fingerprint}. Train into a new bundle to change trunks."
                )
    elif folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise BundleError(f"{folder} exists and is not a bundle (no {BUNDLE_JSON})")
    else:
        bundle = Bundle(trunk=trunk or DEFAULT_TRUNK, cache=cache)
    if bundle.trunk_needs_fit:  # a new bundle's fitted trunk parts learn from this file
        bundle.fit_trunk(dataset.texts)
    # one trunk pass for all heads: embed every text once, then fit from the cache
    if bundle.cache is not None:
        bundle.embed(dataset.texts, progress=progress)
    summaries = []
    bar = progress_bar(total=len(specs), desc="training heads", enabled=progress)
    for spec in specs:
        bar.set_postfix_str(spec.name)
        summaries.append(
            bundle.fit_head(
                spec.name,
                dataset.texts,
                dataset.labels[spec.name],
                kind=spec.kind,
                groups=dataset.groups,
                val_fraction=val_fraction,
                field=spec.field,
                C=C,
                class_weight=class_weight,
                head=head,
                thresholds=thresholds,
                seed=seed,
                progress=progress,
            )
        )
        bar.update()
    bar.close()
    bundle.save(folder)
    return summaries


def finetune_file(
    data: str | Path,
    bundle_path: str | Path,
    tasks: Sequence[str | TaskSpec],
    *,
    text_field: str = "text",
    group_field: str | None = None,
    label_sep: str = ",",
    epochs: int = 2,
    max_length: int = 128,
    batch_size: int = 16,
    lr: float = 2e-5,
    holdout: float = 0.2,
    seed: int = 0,
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
    progress: bool = False,
) -> FinetuneSummary:
    """Fine-tune the bundle's trunk on the tasks of a file, refit every head, save."""
    specs = _task_specs(tasks)
    dataset = _read_tasks(data, specs, text_field, group_field, label_sep)
    bundle = open_bundle(bundle_path, cache_dir=cache_dir, no_cache=no_cache)
    summary = bundle.finetune(
        dataset.texts,
        {s.name: (s.kind, dataset.labels[s.name]) for s in specs},
        bundle_path,
        groups=dataset.groups,
        fields={s.name: s.field for s in specs},
        epochs=epochs,
        max_length=max_length,
        batch_size=batch_size,
        lr=lr,
        holdout=holdout,
        seed=seed,
        progress=progress,
    )
    bundle.save(bundle_path)
    return summary


def evaluate_file(
    data: str | Path,
    bundle_path: str | Path,
    *,
    heads: Sequence[str] | None = None,
    text_field: str = "text",
    label_sep: str = ",",
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Metrics of the bundle's heads on a labelled file.

    Returns ``(metrics by head, notes)``; a head whose field the file lacks is
    skipped with a note. Each head reads the field it was trained from.
    """
    bundle = open_bundle(bundle_path, cache_dir=cache_dir, no_cache=no_cache)
    names = bundle.resolve_heads(heads)
    specs = [
        LabelSpec(name=n, field=str(bundle.head_info[n].get("field", n)), kind=bundle.heads[n].kind)
        for n in names
    ]
    dataset = load_dataset(
        data, text_field=text_field, labels=specs, label_sep=label_sep, skip_missing_fields=True
    )
    notes = [
        f"skipped head {s.name!r}: {dataset.source} has no field {s.field!r}"
        for s in specs
        if s.name in dataset.missing
    ]
    if not dataset.labels:
        raise DataError(
            f"{dataset.source} has none of the heads' label fields "
            f"({', '.join(s.field for s in specs)})"
        )
    return bundle.evaluate(dataset.texts, dataset.labels), notes


def predict_texts(
    bundle_path: str | Path,
    texts: Sequence[str] = (),
    *,
    input_file: str | Path | None = None,
    text_field: str = "text",
    heads: Sequence[str] | None = None,
    batch_size: int = 256,
) -> Iterator[dict[str, Any]]:
    """Answers for command-line texts and/or the texts of a file, in order."""
    all_texts = list(texts)
    if input_file is not None:
        all_texts += read_texts(input_file, text_field=text_field)
    if not all_texts:
        raise ConfigError("nothing to predict: give TEXT arguments or --input FILE")
    bundle = open_bundle(bundle_path, no_cache=True)
    names = bundle.resolve_heads(heads)
    for start in range(0, len(all_texts), batch_size):
        yield from bundle.predict(all_texts[start : start + batch_size], heads=names)


def list_heads(bundle_path: str | Path) -> list[dict[str, Any]]:
    """One row per head: name, kind, number of labels, field, validation metrics."""
    bundle = open_bundle(bundle_path, no_cache=True)
    rows = []
    for name in bundle.heads:
        info = bundle.head_info[name]
        rows.append(
            {
                "name": name,
                "kind": info["kind"],
                "labels": len(bundle.labels(name)),
                "field": info.get("field", name),
                "n_train": info.get("n_train"),
                "metrics": info.get("metrics", {}),
                "created": info.get("created"),
            }
        )
    return rows


def remove_head(bundle_path: str | Path, name: str) -> None:
    bundle = open_bundle(bundle_path, no_cache=True)
    bundle.remove_head(name)
    bundle.save(bundle_path)


def export_file(bundle_path: str | Path, out: str | Path, *, int8: bool = False) -> Path:
    """Export the bundle at ``bundle_path`` to an ONNX bundle in ``out``."""
    from .export import export_bundle

    return export_bundle(open_bundle(bundle_path, no_cache=True), out, int8=int8)
