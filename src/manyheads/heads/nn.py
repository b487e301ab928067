"""The torch side of heads: a task's loss by its kind, the one every trained layer on
top of features uses (MLP heads, the byte trunk's training heads, fine-tuning's task
layers), and the one training loop they all run in (:func:`train_loop`). Imported only
to train; needs torch."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError, require
from .kinds import kind_of

__all__ = [
    "LoopResult",
    "LoopSettings",
    "distil_loss",
    "seeded",
    "shuffled",
    "task_loss",
    "train_loop",
]


def task_loss(
    kind: str,
    logits: Any,
    target: Any,
    *,
    class_weight: Any = None,
    pos_weight: Any = None,
) -> Any:
    """The mean loss of ``logits`` against ``target`` for a head of ``kind``.

    multiclass: softmax cross-entropy (``target``: class indices; ``class_weight``
    per class); binary: sigmoid cross-entropy of one logit (``target``: 0/1 per row, as
    floats; ``class_weight``: the weight of class 0 and 1, a weighted mean);
    multilabel: sigmoid cross-entropy per label (``target``: 0/1 matrix;
    ``pos_weight``: per label, the weight of its positives).
    """
    functional = require("torch", "transformers").nn.functional
    return kind_of(kind).loss(functional, logits, target, class_weight, pos_weight)


def distil_loss(kind: str, logits: Any, target: Any, temperature: float = 1.0) -> Any:
    """The mean loss of ``logits`` against a teacher's probabilities ``target``
    (softened by the same ``temperature``): softmax cross-entropy against each row's
    distribution (multiclass), sigmoid cross-entropy against each probability otherwise;
    times ``temperature ** 2`` so its gradients keep their size as the temperature grows."""
    functional = require("torch", "transformers").nn.functional
    z = logits / temperature
    return kind_of(kind).distil_loss(functional, z, target) * temperature**2


# -- the one training loop -----------------------------------------------------

SCHEDULES = ("constant", "warmup", "one_cycle")
IMPROVEMENT = 1e-6  # relative decrease of the validation loss that counts as better


@dataclass(frozen=True)
class LoopSettings:
    """How :func:`train_loop` trains.

    ``name``: what is trained, for the progress bar and the divergence message.
    ``epochs``: passes over the batches. ``lr`` and ``weight_decay``: AdamW's (a
    parameter group may set its own). ``clip_norm``: every step's gradients clipped to
    this norm (``None``: not clipped). ``schedule``: the learning rate over the steps:
    ``"constant"``; ``"warmup"``, a linear rise over the first ``warmup`` share of the
    steps then a linear fall to zero; ``"one_cycle"``, torch's one-cycle policy peaking
    at ``lr`` after the ``warmup`` share. ``patience``: with a validation loss, stop
    after that many epochs no better than the best (``None``: every epoch runs).
    ``progress``: a progress bar with the running loss. ``fused``: torch's fused AdamW
    where it has one (faster on CPU). ``lr_name``: the parameter the divergence
    message asks to lower.
    """

    name: str
    epochs: int
    lr: float
    weight_decay: float = 0.0
    clip_norm: float | None = None
    schedule: Literal["constant", "warmup", "one_cycle"] = "constant"
    warmup: float = 0.1
    patience: int | None = None
    progress: bool = False
    fused: bool = False
    lr_name: str = "lr"


@dataclass
class LoopResult:
    """What :func:`train_loop` did: ``epochs`` run, ``best_epoch`` (1-based; the epoch
    whose weights the parameters hold at the end), optimiser ``steps`` and the mean
    loss of each epoch over its rows (``losses``)."""

    epochs: int = 0
    best_epoch: int = 0
    steps: int = 0
    losses: list[float] = field(default_factory=list)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[Any]:
    """Torch's global random state seeded with ``seed`` inside the block and put back as
    it was afterwards; yields a generator seeded alike, for the shuffles."""
    torch = require("torch", "transformers")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield torch.Generator().manual_seed(seed)


def shuffled(n: int, batch_size: int, generator: Any) -> Callable[[], list[Any]]:
    """Batches for :func:`train_loop`: the rows ``0..n-1`` in a new random order at every
    epoch (drawn from ``generator``), cut into batches of ``batch_size``."""
    torch = require("torch", "transformers")

    def epoch() -> list[Any]:
        perm = torch.randperm(n, generator=generator)
        return [perm[i : i + batch_size] for i in range(0, n, batch_size)]

    return epoch


def _adamw(torch: Any, params: Sequence[Any], settings: LoopSettings) -> Any:
    options = {"lr": settings.lr, "weight_decay": settings.weight_decay}
    if settings.fused:
        try:
            return torch.optim.AdamW(params, fused=True, **options)
        except (RuntimeError, TypeError, ValueError):  # pragma: no cover - older torch
            pass
    return torch.optim.AdamW(params, **options)


def _scheduler(torch: Any, optimizer: Any, settings: LoopSettings, total: int) -> Any:
    if settings.schedule == "one_cycle":
        # torch's rise must end strictly after the first step and before the last: a
        # run too short for the warmup share gets one of 1.5 steps
        rise = settings.warmup
        if not 0 < rise * total - 1 < total - 1:
            rise = min(0.9, 1.5 / total)
        return torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=settings.lr, total_steps=total, pct_start=rise
        )
    if settings.schedule == "warmup":
        warm = max(1, int(settings.warmup * total))

        def factor(step: int) -> float:
            if step < warm:
                return (step + 1) / warm
            return max(0.0, (total - step) / max(1, total - warm))

        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return None


def _diverged(settings: LoopSettings, epoch: int, loss: float) -> ConfigError:
    """The one message of a training whose loss is no longer a finite number."""
    return ConfigError(
        f"{settings.name} diverged in epoch {epoch} (loss {loss}); "
        f"lower {{{settings.lr_name}}} (now {settings.lr!r})",
        options=(settings.lr_name,),
    )


def train_loop(
    settings: LoopSettings,
    params: Sequence[Any],
    batches: Callable[[], Sequence[Any]],
    batch_loss: Callable[[Any], Any],
    *,
    validation_loss: Callable[[], float] | None = None,
    module: Any = None,
) -> LoopResult:
    """Train ``params`` (tensors, or torch parameter groups) with AdamW as ``settings``
    say, the one loop of every torch-trained part (MLP heads, the byte trunk,
    fine-tuning's probe and its fine-tuning).

    Each epoch takes its batches from ``batches()`` (anything with a length: rows);
    ``batch_loss(batch)`` is the loss to step on, or ``None`` for a batch that counts for
    nothing. A loss that is not finite stops the training with a
    :class:`~manyheads.errors.ConfigError` naming the learning rate. With
    ``validation_loss`` (called after each epoch, ``module`` in eval mode and without
    gradients; lower is better), the best epoch's weights are put back into ``params``
    at the end, and ``settings.patience`` stops the training early. ``module`` (any
    torch module, optional) is put in training mode for each epoch and in eval mode at
    the end.
    """
    torch = require("torch", "transformers")
    from .._progress import progress_bar

    optimizer = _adamw(torch, params, settings)
    weights = [p for group in optimizer.param_groups for p in group["params"]]
    result = LoopResult()
    best_loss, best_epoch, best_state = math.inf, 0, None
    epoch_batches = batches()
    total = settings.epochs * len(epoch_batches)
    scheduler = _scheduler(torch, optimizer, settings, total)
    with progress_bar(total=total, desc=settings.name, enabled=settings.progress) as bar:
        for epoch in range(1, settings.epochs + 1):
            if epoch > 1:
                epoch_batches = batches()
            if module is not None:
                module.train()
            running, seen = 0.0, 0
            for batch in epoch_batches:
                optimizer.zero_grad(set_to_none=True)
                loss = batch_loss(batch)
                seen += len(batch)
                bar.update(1)
                if loss is None:
                    continue
                if not torch.isfinite(loss):
                    raise _diverged(settings, epoch, float(loss.detach()))
                loss.backward()
                if settings.clip_norm is not None:
                    torch.nn.utils.clip_grad_norm_(weights, settings.clip_norm)
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                result.steps += 1
                running += float(loss.detach()) * len(batch)
                if settings.progress:
                    bar.set_postfix(loss=f"{running / seen:.4f}")
            result.losses.append(running / max(seen, 1))
            result.epochs = result.best_epoch = epoch
            if validation_loss is None:
                continue
            if module is not None:
                module.eval()
            with torch.no_grad():
                value = float(validation_loss())
            if best_state is None or value < best_loss * (1 - IMPROVEMENT):
                best_loss, best_epoch = value, epoch
                best_state = [p.detach().clone() for p in weights]
            elif settings.patience is not None and epoch - best_epoch >= settings.patience:
                break
    if module is not None:
        module.eval()
    if best_state is not None:
        result.best_epoch = best_epoch
        with torch.no_grad():
            for p, kept in zip(weights, best_state, strict=True):
                p.copy_(kept)
    return result
