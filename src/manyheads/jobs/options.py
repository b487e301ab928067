"""What the jobs take, checked: tasks (``NAME[=FIELD][:KIND]``), ``C``, a byte trunk's
settings, the cache setting; the defaults of a new bundle. Messages name parameters
as ``{name}`` fields (:class:`~manyheads.errors.ConfigError`), which a front end
shows its own way (the CLI: its flags)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._text import loads_json
from ..bundle import BUNDLE_JSON, Bundle
from ..bundle.store import clear_first_save
from ..cache import EmbeddingCache
from ..data import Dataset, LabelSpec, load_dataset
from ..errors import BundleError, ConfigError, DataError
from ..heads import KINDS, check_head_name
from ..heads.kinds import kind_problem
from ..heads.settings import HEAD_RULES
from ..trunks import TrunkBase, load_trunk, truncating

if TYPE_CHECKING:
    from ..train import ByteTrainSummary, HeadSummary
    from ..trunks.byte import ByteConfig

__all__ = [
    "BYTE_TRUNK_EPOCHS",
    "DEFAULT_BUNDLE",
    "DEFAULT_TRUNK",
    "TaskSpec",
    "TrainReport",
    "cache_setting",
    "open_bundle",
    "parse_C",
    "parse_byte_config",
    "parse_task",
    "read_tasks",
    "task_specs",
]

# The defaults of `manyheads train`, chosen from bench/quality.py (see the docs):
# MiniLM joined with a TF-IDF-like hashing trunk, C picked on the validation split,
# thresholds that maximise accuracy.
DEFAULT_TRUNK = "minilm+tfidf"
# What `manyheads predict` and `manyheads serve` answer with when no bundle is given.
DEFAULT_BUNDLE = "content"
BYTE_TRUNK_EPOCHS = 4


@dataclass(frozen=True)
class TaskSpec:
    """A head to train from a file: ``NAME[=FIELD][:KIND]``."""

    name: str
    field: str
    kind: str

    def label_spec(self) -> LabelSpec:
        return LabelSpec(name=self.name, field=self.field, kind=self.kind)


@dataclass(frozen=True)
class TrainReport:
    """What :func:`train_report` did: the heads at the bundle's tier; for a byte trunk
    trained here, its training summary; for a byte bundle, the heads fitted at its
    other tiers (``BUNDLE/tiers/<dim>/``)."""

    heads: list[HeadSummary]
    trunk: ByteTrainSummary | None = None
    tier: int | None = None
    tiers: dict[int, list[HeadSummary]] = field(default_factory=dict)


def parse_task(spec: str) -> TaskSpec:
    """Parse ``NAME``, ``NAME:KIND``, ``NAME=FIELD`` or ``NAME=FIELD:KIND``."""
    text = spec.strip()
    kind = "multiclass"
    bad = f"bad {{task}} {spec!r}"
    if ":" in text:
        text, kind = text.rsplit(":", 1)
        problem = kind_problem(kind)
        if problem is not None:
            raise ConfigError(f"{bad}: {problem}", options=("task",))
    name, _, fld = text.partition("=")
    if not name or ("=" in text and not fld):
        raise ConfigError(f"{bad}: expected NAME[=FIELD][:{'|'.join(KINDS)}]", options=("task",))
    try:
        check_head_name(name)
    except DataError as exc:
        raise ConfigError(f"{bad}: {exc}", options=("task",)) from exc
    return TaskSpec(name=name, field=fld or name, kind=kind)


def task_specs(tasks: Sequence[str | TaskSpec]) -> list[TaskSpec]:
    specs = [t if isinstance(t, TaskSpec) else parse_task(t) for t in tasks]
    if not specs:
        raise ConfigError("give at least one {task} NAME[:KIND]", options=("task",))
    return specs


def read_tasks(
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
    """A positive number or ``"auto"`` (from a command line, both arrive as text),
    judged by the head's rule for ``C``; a refusal shows the value as given."""
    rule = HEAD_RULES["C"]
    try:
        number = value if value == "auto" else float(value)
    except (TypeError, ValueError):
        rule.check("C", value)  # text that is no number: refused as given
        raise
    if not rule.accepts(number):
        rule.check("C", value)
    return number


def parse_trees(value: int | str) -> int | str:
    """``"auto"`` or a count of trees (from a command line, both arrive as text), judged
    by the tree head's rule; a refusal shows the value as given."""
    from ..train.settings import FitSettings

    rule = FitSettings._constraints["trees"]
    number: int | str = value
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    if not rule.accepts(number):
        rule.check("trees", value)
    return number


def cache_setting(cache_dir: str | Path | None, no_cache: bool) -> Any:
    """The embedding cache of a job: none, the one in ``cache_dir``, or the default one."""
    if no_cache:
        return None
    if cache_dir is not None:
        return EmbeddingCache(Path(cache_dir) / "embeddings.sqlite")
    return "default"


def open_bundle(
    path: str | Path,
    *,
    cache_dir: str | Path | None = None,
    no_cache: bool = False,
    tier: int | None = None,
    device: str = "auto",
) -> Bundle:
    return Bundle.load(path, cache=cache_setting(cache_dir, no_cache), tier=tier, device=device)


def parse_byte_config(value: str | dict[str, Any] | None) -> ByteConfig:
    """A :class:`ByteConfig` from a JSON object of its fields (text or dict), checked."""
    from ..trunks.byte import ByteConfig

    if value is None:
        return ByteConfig()
    doc: Any = value
    if isinstance(value, str):
        try:
            doc = loads_json(value)
        except ValueError as exc:
            raise ConfigError(
                f"{{byte_config}} is not valid JSON: {exc}", options=("byte_config",)
            ) from None
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{{byte_config}} must be a JSON object of byte trunk settings, got {value!r}",
            options=("byte_config",),
        )
    for key in ("dims", "dilations"):
        items = doc.get(key, [])
        if not isinstance(items, list | tuple) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in items
        ):
            raise ConfigError(
                f"{{byte_config}}: {key} must be a list of integers, got {items!r}",
                options=("byte_config",),
            )
    try:
        return ByteConfig.from_settings(doc)
    except ConfigError as exc:
        raise ConfigError(f"{{byte_config}}: {exc}", options=("byte_config",)) from None


def refuse_foreign_folder(folder: Path) -> None:
    """A folder that is there and holds something but no bundle is refused: a new bundle
    is not written over it. What a first save of a new bundle left when it was stopped
    (its temp files, kept data, graph files) does not count: it is cleared
    (:func:`~manyheads.bundle.store.clear_first_save`), as are the temp files of a writer
    creating it now."""
    if folder.exists() and (
        not folder.is_dir()
        or (
            any(not p.name.startswith(".") for p in folder.iterdir())
            and not clear_first_save(folder)
        )
    ):
        raise BundleError(f"{folder} exists and is not a bundle (no {BUNDLE_JSON})")


def new_trunk(trunk: str | None, truncate: int | None) -> str | TrunkBase:
    """The trunk of a new bundle: ``trunk`` (default :data:`DEFAULT_TRUNK`), its
    transformer parts reading a text's first ``truncate`` tokens only when given
    (:func:`~manyheads.trunks.truncating`)."""
    name = trunk or DEFAULT_TRUNK
    return name if truncate is None else truncating(name, truncate)


def refuse_truncate(truncate: int | None, folder: Path) -> None:
    """``truncate`` shapes a new bundle's trunk: refused for a bundle that has one."""
    if truncate is not None:
        raise ConfigError(
            f"{{truncate}} shapes the trunk of a new bundle; bundle {folder} has its "
            "trunk already (train into a new bundle to read texts another way)",
            options=("truncate",),
        )


def other_trunk(bundle: Bundle, trunk: str) -> TrunkBase | None:
    """The trunk named ``trunk`` when it is not ``bundle``'s (neither its settings nor its
    fingerprint): a job refuses to add heads on it; ``None`` when it is the same."""
    wanted = load_trunk(trunk)
    same = wanted.spec() == bundle.trunk_reference["spec"]  # fitted parts: same settings
    if same or wanted.fingerprint == bundle.trunk_fingerprint:
        return None
    return wanted
