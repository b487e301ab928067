"""Fine-tune a transformer trunk on several labelled tasks at once (LP-FT).

:func:`finetune_transformer` adapts a local Hugging Face / sentence-transformers
folder to your tasks and writes the result as a new model folder, which
:class:`~manyheads.TransformerTrunk` (and so ``Bundle(trunk=PATH)``) loads like
any other. Heads are then fitted on the new trunk as usual; the heads trained
here only serve the fine-tuning and are not saved.

The recipe is LP-FT (linear probing, then fine-tuning):

1. **Linear probing.** With the transformer frozen, every text is embedded once
   and one linear layer per task is trained on those embeddings (softmax
   cross-entropy for ``multiclass``, binary cross-entropy with logits for
   ``binary`` and ``multilabel``), ``probe_epochs`` epochs of mini-batch AdamW
   without weight decay (Adam) at ``head_lr``, starting from zero weights.
2. **Fine-tuning.** The task layers start from the probe and are trained
   together with the transformer: AdamW with ``lr`` for the transformer
   (weight decay 0.01, none on biases and layer norms) and ``head_lr`` for the
   task layers (no weight decay), a linear warm-up over the first 10% of the
   steps then a linear decay to zero, gradients clipped to norm 1.0.
   Both stages run in :func:`~manyheads.heads.nn.train_loop`, on one sequence of
   shuffles; a loss that is not finite stops them, naming the learning rate to lower.
   The loss is ``sum(task_weights[t] * loss_t)``; every task weighs 1.0 unless
   ``task_weights`` says otherwise (so a task's gradient does not shrink as
   tasks are added). Each task loss is a mean over its rows (and over labels
   for ``multilabel``).

Embeddings during training are computed exactly as :class:`TransformerTrunk`
computes them: the same pooling (the folder's, or ``pooling``) followed by L2
normalisation, so the heads fitted later see the vectors the task layers were
trained on. One difference: **training truncates** each text to
``max_length`` tokens (special tokens kept), while inference splits long texts
into overlapping windows of the saved folder's own window size and averages
them. Texts that fit in ``max_length`` tokens get the same vector either way.

The output folder holds safetensors weights only (no pickle), the tokenizer
files, and for a sentence-transformers source its ``modules.json``,
``sentence_bert_config.json`` (same ``max_seq_length``) and pooling folder,
plus ``finetune.json`` describing how it was made. It is written into a
temporary folder next to ``out_dir`` and renamed into place at the end, so a
failure leaves nothing behind; ``out_dir`` must not exist or be empty.

Runs on the CPU and is deterministic for a given ``seed`` (same machine, same
thread count). The global torch random state is left as it was.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._io import staged_dir
from .._progress import transformers_bars
from .._settings import Settings
from ..errors import ConfigError, DataError, ManyheadsError, require
from ..heads.kinds import check_kind, kind_of
from ..heads.nn import (
    LoopResult,
    LoopSettings,
    distil_loss,
    seeded,
    shuffled,
    task_loss,
    train_loop,
)
from ..heads.targets import learn_targets
from ..trunks.base import check_texts
from ..trunks.device import resolve_device
from ..trunks.transformer import TransformerTrunk
from .encoder import (
    TrainingEncoder,
    positive_float,
    positive_int,
    save_encoder,
    training_embeddings,
)

__all__ = [
    "FinetuneReport",
    "Finetuning",
    "SoftTask",
    "finetune_transformer",
    "training_embeddings",
]

_WARMUP_FRACTION = 0.1
_WEIGHT_DECAY = 0.01
_CLIP_NORM = 1.0


@dataclass(frozen=True)
class FinetuneReport:
    """What :func:`finetune_transformer` did.

    ``out_dir``: the new model folder. ``epochs``: fine-tuning epochs run.
    ``steps``: optimiser steps of the fine-tuning stage. ``losses``: mean
    weighted multi-task loss of each fine-tuning epoch. ``probe_losses``: the
    same for each linear-probing epoch. ``seconds``: wall time of the whole
    call. ``fingerprint``: ``TransformerTrunk(out_dir).fingerprint``.
    """

    out_dir: Path
    epochs: int
    steps: int
    losses: list[float] = field(default_factory=list)
    probe_losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    fingerprint: str = ""


@dataclass(frozen=True)
class SoftTask:
    """A teacher's answers to learn from while fine-tuning (``soft_tasks``): ``probs``
    (texts x labels, already softened by ``temperature``; a binary task's two columns
    are ``[1 - p, p]``) and, when the teacher exposes them, its ``logits`` (same shape),
    learnt through an auxiliary layer of their own."""

    kind: str
    probs: np.ndarray
    logits: np.ndarray | None = None
    temperature: float = 1.0


@dataclass(frozen=True)
class Finetuning(Settings):
    """How :func:`finetune_transformer` trains (its options, described there); each
    one is checked when the object is made."""

    epochs: int = 2
    max_length: int = 128
    batch_size: int = 16
    lr: float = 2e-5
    head_lr: float = 1e-3
    probe_epochs: int = 20
    seed: int = 0
    pooling: str | None = None
    progress: bool = False
    device: str = "cpu"

    def __post_init__(self) -> None:
        checked = {
            "epochs": positive_int("epochs", self.epochs),
            "max_length": positive_int("max_length", self.max_length),
            "batch_size": positive_int("batch_size", self.batch_size),
            "probe_epochs": positive_int("probe_epochs", self.probe_epochs, minimum=0),
            "lr": positive_float("lr", self.lr),
            "head_lr": positive_float("head_lr", self.head_lr),
        }
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")
        checked["seed"] = int(self.seed)
        resolve_device(self.device)  # refused in one line where it cannot run
        for name, value in checked.items():
            object.__setattr__(self, name, value)


@dataclass
class _Task:
    name: str
    kind: str
    classes: list[Any]
    target: np.ndarray  # int64 class indices (multiclass), float32 0/1 matrix or probabilities
    weight: float
    soft: SoftTask | None = None

    @property
    def outputs(self) -> int:
        return kind_of(self.kind).n_outputs(len(self.classes))


# -- validation ------------------------------------------------------------


def _soft_task(n_texts: int, name: str, soft: SoftTask) -> _Task:
    kind = check_kind(soft.kind, f"task {name!r}:")
    if not kind.soft_targets:
        raise ConfigError(f"task {name!r}: soft targets are multiclass, binary or multilabel")
    probs = np.asarray(soft.probs, dtype=np.float32)
    if probs.ndim != 2 or probs.shape[0] != n_texts or kind.output_columns(probs).shape[1] < 1:
        raise DataError(f"task {name!r}: probs must be {n_texts} rows x labels, got {probs.shape}")
    if soft.logits is not None and np.shape(soft.logits) != probs.shape:
        raise DataError(f"task {name!r}: logits must have the shape of probs {probs.shape}")
    target = kind.output_columns(probs)
    return _Task(name, kind, list(range(probs.shape[1])), target, 1.0, soft)


def _prepare_tasks(
    n_texts: int,
    tasks: Mapping[str, tuple[str, Sequence[Any]]],
    task_weights: Mapping[str, float] | None,
    soft_tasks: Mapping[str, SoftTask] | None = None,
) -> list[_Task]:
    soft_tasks = dict(soft_tasks or {})
    clash = sorted(set(soft_tasks) & set(tasks or {}))
    if clash:
        raise ConfigError(f"tasks and soft_tasks both name {clash}")
    if soft_tasks and not tasks:
        return [_soft_task(n_texts, name, soft) for name, soft in soft_tasks.items()]
    if not isinstance(tasks, Mapping) or not tasks:
        raise DataError(
            "no tasks: give at least one task as {name: (kind, labels)} "
            "with kind multiclass, binary or multilabel"
        )
    weights = dict(task_weights or {})
    unknown = sorted(set(weights) - set(tasks))
    if unknown:
        raise ConfigError(
            f"task_weights names unknown task(s) {unknown}; tasks are {sorted(tasks)}"
        )
    out: list[_Task] = []
    for name, spec in tasks.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"task names must be non-empty strings, got {name!r}")
        if not isinstance(spec, tuple | list) or len(spec) != 2:
            raise ConfigError(f"task {name!r} must be a (kind, labels) pair, got {spec!r:.80}")
        kind, labels = spec
        kind = check_kind(kind, f"task {name!r}:")
        if isinstance(labels, str | bytes):
            raise DataError(f"task {name!r}: labels must be a sequence, not a single string")
        labels = list(labels)
        if len(labels) != n_texts:
            raise DataError(f"task {name!r} has {len(labels)} labels but there are {n_texts} texts")
        weight = weights.get(name, 1.0)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, numbers.Real)
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise ConfigError(
                f"task_weights[{name!r}] must be a non-negative number, got {weight!r}"
            )
        try:
            learnt = learn_targets(kind, labels, where=f"task {name!r}: ")
        except DataError as exc:
            raise DataError(str(exc)) from None
        target = kind.layer_target(learnt.y)
        out.append(_Task(name, kind, learnt.classes, target, float(weight)))
    if not any(t.weight > 0 for t in out):
        raise ConfigError("task_weights are all zero; at least one task must weigh > 0")
    return out + [_soft_task(n_texts, name, soft) for name, soft in soft_tasks.items()]


def _check_out_dir(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(
            f"out_dir {str(out)!r} already exists and is not an empty folder; "
            "give a new (or empty) folder"
        )


# -- the encoder used for training -----------------------------------------


# -- training ----------------------------------------------------------------


def finetune_transformer(
    model_dir: str | Path,
    texts: Sequence[str],
    tasks: Mapping[str, tuple[str, Sequence[Any]]],
    out_dir: str | Path,
    *,
    task_weights: Mapping[str, float] | None = None,
    soft_tasks: Mapping[str, SoftTask] | None = None,
    **options: Any,
) -> FinetuneReport:
    """Fine-tune the transformer in ``model_dir`` on ``tasks`` and save it to ``out_dir``.

    Parameters
    ----------
    model_dir
        A local Hugging Face or sentence-transformers folder (as
        :class:`TransformerTrunk` accepts).
    texts
        The training texts.
    tasks
        ``{name: (kind, labels)}``; ``kind`` is ``multiclass``, ``binary`` or
        ``multilabel``; ``labels`` has one entry per text (a list of labels for
        ``multilabel``). Classes are the sorted distinct labels.
    out_dir
        The new model folder; it must not exist or be empty.
    task_weights
        Weight of each task's loss; a missing task weighs 1.0.
    soft_tasks
        ``{name: SoftTask}``: teachers' answers to learn from (``tasks`` may then be
        empty). Each one's loss is the distillation loss against its probabilities
        (:func:`~manyheads.heads.nn.distil_loss`) plus, when it has logits, the mean
        squared error of an auxiliary linear layer's outputs against them: the
        logit-level term goes through a layer of its own, so it shapes the shared
        encoder without pulling the task layer away from the probabilities.

    The options, by name (the fields of :class:`Finetuning`):

    epochs
        Fine-tuning epochs (after the linear probe).
    max_length
        Training truncates each text to this many tokens (capped at the model's
        position limit). The saved folder keeps the source's inference window.
    batch_size
        Texts per optimiser step (probe and fine-tuning).
    lr, head_lr
        Learning rates of the transformer and of the task layers.
    probe_epochs
        Epochs of the linear-probing stage (0 skips it: task layers start at zero).
    seed
        Seeds weight initialisation, dropout and shuffling.
    pooling
        ``mean``, ``cls`` or ``max``; default: the folder's (mean for a plain
        Hugging Face folder). A pooling other than the folder's is written into
        the saved folder, so it loads with the pooling it was trained with.
    progress
        Show a progress bar with the running loss on a terminal.
    device
        Where it trains (``cpu``, ``cuda``, ``cuda:N``, ``auto``), in float32; a
        bundle's fine-tuning trains where its trunk runs.

    Raises :class:`~manyheads.ConfigError` for a bad parameter or an unknown
    kind, :class:`~manyheads.DataError` for bad texts or labels, and
    :class:`~manyheads.MissingDependencyError` without torch / transformers.
    """
    started = time.perf_counter()
    settings = Finetuning(**options)
    texts = check_texts(texts)
    if not texts:
        raise DataError("no texts to fine-tune on")
    task_list = _prepare_tasks(len(texts), tasks, task_weights, soft_tasks)
    out = Path(out_dir).expanduser().absolute()
    _check_out_dir(out)
    torch = require("torch", "transformers")
    require("transformers", "transformers")

    with seeded(settings.seed) as generator:
        with transformers_bars(settings.progress):
            encoder = TrainingEncoder(
                model_dir,
                max_length=settings.max_length,
                pooling=settings.pooling,
                device=settings.device,
            )
        if out.resolve() == encoder.root or encoder.root in out.resolve().parents:
            raise ConfigError(f"out_dir {str(out)!r} must not be inside the source model folder")
        probe, tuned = _train(
            torch, encoder, encoder.token_ids(texts), task_list, settings, generator
        )

    info = {
        "source": str(encoder.root),
        "source_fingerprint": encoder.trunk.fingerprint,
        "pooling": encoder.pooling,
        "tasks": {
            t.name: {
                "kind": t.kind,
                "classes": len(t.classes),
                "weight": t.weight,
                "teacher": t.soft is not None,
            }
            for t in task_list
        },
        "texts": len(texts),
        "epochs": settings.epochs,
        "max_length": encoder.max_length,
        "batch_size": settings.batch_size,
        "lr": settings.lr,
        "head_lr": settings.head_lr,
        "probe_epochs": settings.probe_epochs,
        "seed": settings.seed,
        "steps": tuned.steps,
        "losses": tuned.losses,
        "probe_losses": probe.losses,
    }
    pooling_changed = encoder.pooling != (encoder.st_pooling or "mean")
    with staged_dir(out, _check_out_dir) as tmp:
        with transformers_bars(settings.progress):
            save_encoder(encoder, tmp, pooling_changed=pooling_changed, info=info)
        saved = TransformerTrunk(tmp)
        if saved.pooling != encoder.pooling:  # pragma: no cover - a bug if it happens
            raise ManyheadsError(
                f"the saved folder loads with pooling {saved.pooling!r}, "
                f"trained with {encoder.pooling!r}"
            )
        fingerprint = saved.fingerprint  # independent of the folder's path
    return FinetuneReport(
        out_dir=out,
        epochs=settings.epochs,
        steps=tuned.steps,
        losses=tuned.losses,
        probe_losses=probe.losses,
        seconds=time.perf_counter() - started,
        fingerprint=fingerprint,
    )


def _train(
    torch: Any,
    encoder: TrainingEncoder,
    ids: list[list[int]],
    task_list: list[_Task],
    settings: Finetuning,
    generator: Any,
) -> tuple[LoopResult, LoopResult]:
    """LP-FT on the token ids of the texts: the task layers probed on frozen embeddings,
    then trained with the transformer (see the module's docstring); what each stage did."""
    where = encoder.device  # the task layers and their targets train beside the model
    targets = [torch.from_numpy(t.target).to(where) for t in task_list]
    n, dim = len(ids), encoder.trunk.dim
    heads = torch.nn.ModuleList([torch.nn.Linear(dim, t.outputs) for t in task_list]).to(where)
    # the auxiliary layers of the teachers' logits (a logit-level term of their own)
    logit_targets = {
        str(i): torch.from_numpy(np.asarray(t.soft.logits, dtype=np.float32)).to(where)
        for i, t in enumerate(task_list)
        if t.soft is not None and t.soft.logits is not None
    }
    aux = torch.nn.ModuleDict(
        {i: torch.nn.Linear(dim, logit_targets[i].shape[1]) for i in logit_targets}
    ).to(where)
    with torch.no_grad():
        for head in [*heads, *aux.values()]:
            head.weight.zero_()
            head.bias.zero_()
    mse = torch.nn.functional.mse_loss

    def multitask_loss(emb: Any, rows: Any) -> Any:
        total = emb.new_zeros(())
        for i, (task, head, target) in enumerate(zip(task_list, heads, targets, strict=True)):
            if task.weight <= 0:
                continue
            if task.soft is None:
                loss = task_loss(task.kind, head(emb), target[rows])
            else:
                loss = distil_loss(task.kind, head(emb), target[rows], task.soft.temperature)
                if str(i) in aux:
                    loss = loss + mse(aux[str(i)](emb), logit_targets[str(i)][rows])
            total = total + task.weight * loss
        return total

    batches = shuffled(n, settings.batch_size, generator)  # one order of shuffles for both
    task_params = [*heads.parameters(), *aux.parameters()]
    # 1. linear probing on frozen embeddings
    probe = LoopResult()
    if settings.probe_epochs:
        features = encoder.embed_all(ids, max(settings.batch_size, 64))
        probing = LoopSettings(
            "linear probing", settings.probe_epochs, settings.head_lr, fused=True, lr_name="head_lr"
        )
        probe = train_loop(probing, task_params, batches, lambda r: multitask_loss(features[r], r))

    # 2. fine-tuning the transformer and the task layers together
    decay, no_decay = [], []
    for pname, param in encoder.model.named_parameters():
        if not param.requires_grad:
            continue
        lowered = pname.lower()
        if param.ndim < 2 or "norm" in lowered or lowered.endswith("bias"):
            no_decay.append(param)
        else:
            decay.append(param)
    tuning = LoopSettings(
        name="fine-tuning",
        epochs=settings.epochs,
        lr=settings.lr,
        weight_decay=_WEIGHT_DECAY,
        clip_norm=_CLIP_NORM,
        schedule="warmup",
        warmup=_WARMUP_FRACTION,
        progress=settings.progress,
        fused=True,
    )
    tuned = train_loop(
        tuning,
        [
            {"params": decay},
            {"params": no_decay, "weight_decay": 0.0},
            {"params": task_params, "lr": settings.head_lr, "weight_decay": 0.0},
        ],
        batches,
        lambda rows: multitask_loss(encoder.embed([ids[i] for i in rows.tolist()]), rows),
        module=encoder.model,
    )
    return probe, tuned
