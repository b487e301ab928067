"""Training a byte trunk (:class:`~manyheads.trunks.byte.ByteTrunk`) multi-task.

Training (:func:`train_byte_trunk`) fits the trunk jointly with one linear
head per task and per nested dimension (the Matryoshka loss), each task's
loss divided by its loss at chance (``log K`` for K classes, ``log 2`` per
label), so a 50-way task does not drown a binary one, nor an easy task a hard
one (``weighting="uncertainty"``: learned ``exp(-s) * loss + s`` instead).
With a bag, each task also has a head on the bag alone, and half the texts
(``path_dropout``) see no convolution features: the bag must answer by itself,
which keeps the trunk from leaning on what the convolutions memorise; with
``crop``, a share of the texts is read at every epoch as a random piece of
itself, so no text can be learnt by heart. The training heads are dropped
afterwards: heads are fitted on the frozen trunk
like on any other (``Bundle.fit_head``), from cached vectors.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError, require
from ..heads.kinds import check_kind, kind_of
from ..heads.nn import LoopSettings, task_loss, train_loop
from ..heads.targets import Targets, learn_targets
from ..trunks.base import check_texts
from ..trunks.byte import BAG_INITS, ByteConfig, ByteTrunk, byte_ids
from ..trunks.byte.config import PAD, quantize_rows
from ..trunks.byte.model import build_module

__all__ = ["ByteTrainSummary", "ByteTraining", "train_byte_trunk"]


@dataclass
class ByteTrainSummary:
    """What :func:`train_byte_trunk` did."""

    epochs: int
    steps: int
    seconds: float
    losses: list[float] = field(default_factory=list)  # mean loss per epoch
    task_weights: dict[str, float] = field(default_factory=dict)  # exp(-s) at the end


@dataclass(frozen=True)
class ByteTraining:
    """How :func:`train_byte_trunk` trains (its options, described there); each one is
    checked when the object is made, those that name tasks when training starts."""

    epochs: int = 4
    batch_size: int = 64
    lr: float = 2e-3
    seed: int = 0
    weighting: str = "chance"
    dropout: float = 0.0
    path_dropout: float = 0.5
    bag_init: str = "small"
    crop: float = 0.0
    crop_tasks: Sequence[str] | None = None
    crop_min: int = 16
    task_weights: Mapping[str, float] | None = None
    threads: int | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        if self.bag_init not in BAG_INITS:
            raise ConfigError(
                f"bag_init must be one of {', '.join(BAG_INITS)}, got {self.bag_init!r}"
            )
        if self.weighting not in ("chance", "uncertainty"):
            raise ConfigError(
                f"weighting must be 'chance' or 'uncertainty', got {self.weighting!r}"
            )
        if self.epochs < 1 or self.batch_size < 1 or not self.lr > 0:
            raise ConfigError("epochs and batch_size must be positive, lr > 0")
        for setting in ("dropout", "path_dropout", "crop"):
            rate = getattr(self, setting)
            if not isinstance(rate, int | float) or not 0.0 <= rate < 1.0:
                raise ConfigError(f"{setting} must be in [0, 1), got {rate!r}")
        crop_min = self.crop_min
        if not isinstance(crop_min, int) or isinstance(crop_min, bool) or crop_min < 1:
            raise ConfigError(f"crop_min must be a positive integer, got {crop_min!r}")

    def weights(self, tasks: Collection[str]) -> dict[str, float]:
        """The factor on each task's loss (``task_weights``; 1 for a task it leaves out)."""
        weights = {n: 1.0 for n in tasks}
        for name, factor in (self.task_weights or {}).items():
            if name not in tasks:
                raise ConfigError(f"task_weights names a task not trained: {name!r}")
            if not isinstance(factor, int | float) or isinstance(factor, bool) or not factor > 0:
                raise ConfigError(
                    f"task_weights[{name!r}] must be a positive number, got {factor!r}"
                )
            weights[name] = float(factor)
        return weights

    def kept_on_crop(self, tasks: Collection[str]) -> set[str]:
        """The tasks whose labels a piece of a text keeps (``crop_tasks``)."""
        keep = set(tasks) if self.crop_tasks is None else set(self.crop_tasks)
        if keep - set(tasks):
            raise ConfigError(
                f"crop_tasks names tasks not trained: {', '.join(sorted(keep - set(tasks)))}"
            )
        return keep


def _targets(name: str, labels: Sequence[Any], kind: str) -> Targets:
    """A task's targets (:func:`~manyheads.heads.targets.learn_targets`): labels read as
    text, ``None`` = this text is not labelled for this task."""
    sets = check_kind(kind, f"task {name!r}:").is_set

    def as_text(v: Any) -> Any:
        if v is None or (sets and not isinstance(v, list | tuple | set)):
            return v  # no label; or not a list of labels, which learn_targets says
        return [str(x) for x in v] if sets else str(v)

    return learn_targets(kind, [as_text(v) for v in labels], where=f"task {name!r}: ", missing=True)


def _length_batches(
    lengths: np.ndarray, batch_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Shuffled batches of texts of similar length (less padding): shuffle, sort within
    windows of 50 batches, cut, shuffle the batches."""
    order = rng.permutation(len(lengths))
    window = batch_size * 50
    batches = []
    for start in range(0, len(order), window):
        part = order[start : start + window]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def _crop(
    ids: np.ndarray, share: float, least: int, multiple: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` with a ``share`` of its rows longer than ``least`` bytes replaced by a random
    piece of themselves (see ``train_byte_trunk``), re-padded to a ``multiple``; and which
    rows were cut."""
    sizes = (ids != PAD).sum(1)
    cut = (rng.random(len(ids)) < share) & (sizes > least)
    if not cut.any():
        return ids, cut
    out = np.where(cut[:, None], PAD, ids)
    ends = sizes.copy()
    for i in np.flatnonzero(cut):
        n = int(sizes[i])
        size = int(np.exp(rng.uniform(np.log(least), np.log(n))))
        start = int(rng.integers(0, n - size + 1))
        stop = start + size
        row = ids[i]
        # UTF-8 continuation bytes (0x80-0xBF, tokens 129-192) do not start or end a piece
        while start < stop - 1 and 129 <= row[start] <= 192:
            start += 1
        while stop < n and 129 <= row[stop] <= 192:
            stop += 1
        out[i, : stop - start] = row[start:stop]
        ends[i] = stop - start
    width = int(-(-ends.max() // multiple) * multiple)
    return out[:, :width], cut


def train_byte_trunk(
    texts: Sequence[str],
    tasks: dict[str, tuple[Sequence[Any], str]],
    *,
    config: ByteConfig | None = None,
    start: ByteTrunk | None = None,
    **options: Any,
) -> tuple[ByteTrunk, ByteTrainSummary]:
    """Train a byte trunk on ``texts`` jointly for ``tasks`` (``{name: (labels, kind)}``;
    a label may be ``None``: that text does not count for that task).

    Every task gets one linear head per nested dimension; its loss is the
    mean over dimensions (Matryoshka), divided by the task's loss at chance
    (``weighting="chance"``) or weighted by learned uncertainty
    (``"uncertainty"``, which favours easy tasks). With a bag (``config.bag``),
    every task also has a head on the bag alone (its loss added), and the
    convolutions' features of a ``path_dropout`` share of the texts are left
    out. ``dropout``: on the embedded bytes and the pooled features.
    ``bag_init``: the bag table starts ``"small"`` (uniform in ±1/``bag_dim``, as
    fastText starts its n-gram vectors) or ``"normal"`` (torch's N(0, 1), the
    earlier training: every rarely seen row stays loud noise in the texts that
    have it; it scored 0.77 on code and 0.83 on language where ``"small"``
    scored 0.83 and 0.87, bench/byte_shapes.py). ``crop``: that share of the
    texts longer than ``crop_min`` bytes is read, anew at every epoch, as a
    random piece of itself (a random start; a length from ``crop_min`` bytes to
    the whole, evenly spread on a log scale; cut at character boundaries), so
    the trunk sees short texts of every kind and cannot learn a text by heart;
    a piece keeps its labels for the tasks in ``crop_tasks`` (default: every
    task) and counts for no other (a piece of a text holding a key may not hold
    it). ``task_weights``: a factor on a task's loss (default 1 each; a task that
    must not miss, such as secrets among many texts without, can weigh more).
    ``start``: a byte trunk of the same config to go on training from (its
    weights, the bag's int8 rows read back as floats) instead of new weights; the
    training heads start new either way. The options are the fields of
    :class:`ByteTraining` (``epochs``, ``batch_size``, ``lr``, ``seed``, ``threads``:
    torch's thread count, ``progress``: a progress bar, and the ones above), by name.
    AdamW with a one-cycle learning rate, gradients clipped to norm 1
    (:func:`~manyheads.heads.nn.train_loop`).
    Returns the trunk (its training heads dropped) and a summary.
    """
    import time

    settings = ByteTraining(**options)
    torch = require("torch", "transformers")
    config = config or ByteConfig()
    texts = check_texts(texts)
    if not texts:
        raise DataError("no training texts")
    if not tasks:
        raise DataError("give at least one task to train the byte trunk on")
    for name, value in tasks.items():
        if not isinstance(value, tuple) or len(value) != 2:
            raise DataError(f"task {name!r}: give (labels, kind)")
        if len(value[0]) != len(texts):
            raise DataError(f"task {name!r}: {len(value[0])} labels for {len(texts)} texts")
    weights = settings.weights(tasks)
    if start is not None and start.config != config:
        raise ConfigError("start: the trunk to go on from has another config than the one given")
    keep_on_crop = settings.kept_on_crop(tasks)
    targets = {n: _targets(n, labels, kind) for n, (labels, kind) in tasks.items()}
    kinds = {n: kind_of(kind) for n, (_, kind) in tasks.items()}
    t0 = time.perf_counter()
    if settings.threads:
        torch.set_num_threads(settings.threads)
    rng = np.random.default_rng(settings.seed)
    torch.manual_seed(settings.seed)
    model = build_module(
        config,
        settings.dropout,
        settings.path_dropout if config.bag else 0.0,
        train=True,
        bag_init=settings.bag_init,
    )
    if start is not None:
        model.load_state_dict({k: torch.from_numpy(v) for k, v in _float_state(start).items()})
    nn = torch.nn
    heads = nn.ModuleDict(
        {
            n: nn.ModuleList(nn.Linear(d, len(t.classes)) for d in config.dims)
            for n, t in targets.items()
        }
    )
    bag_heads = nn.ModuleDict(  # the bag alone answers every task too (its own loss)
        {n: nn.Linear(config.bag_dim, len(t.classes)) for n, t in targets.items() if config.bag}
    )
    uncertainty = settings.weighting == "uncertainty"
    log_var = nn.Parameter(torch.zeros(len(targets)), requires_grad=uncertainty)
    chance = {
        n: math.log(2.0) if kinds[n].is_set else math.log(len(t.classes))
        for n, t in targets.items()
    }
    ids_all, lengths = byte_ids(texts, config.max_bytes, config.stride)
    names = list(targets)

    def batch_loss(rows: np.ndarray) -> Any:
        width = int(lengths[rows].max())
        batch = ids_all[rows, :width]
        cropped = np.zeros(len(rows), dtype=bool)
        if settings.crop:
            batch, cropped = _crop(batch, settings.crop, settings.crop_min, config.stride, rng)
        emb, bag = model(torch.from_numpy(batch), parts=True)
        loss = torch.zeros(())
        for k, name in enumerate(names):
            y_all, present = targets[name].y, targets[name].present[rows]
            if name not in keep_on_crop:
                present = present & ~cropped
            if not present.any():
                continue
            y = torch.from_numpy(y_all[rows[present]])
            sub = emb[torch.from_numpy(present)]
            # binary tasks train two outputs, as multiclass ones do
            loss_kind = "multilabel" if kinds[name].is_set else "multiclass"
            this = sum(
                task_loss(loss_kind, head(sub[:, :d]), y)
                for d, head in zip(config.dims, heads[name], strict=True)
            ) / len(config.dims)
            if name in bag_heads:
                this = this + task_loss(
                    loss_kind, bag_heads[name](bag[torch.from_numpy(present)]), y
                )
            if uncertainty:
                loss = loss + weights[name] * torch.exp(-log_var[k]) * this + log_var[k]
            else:
                loss = loss + weights[name] * this / chance[name]
        # None: no text of this batch counts for any task
        return loss if loss.requires_grad else None

    training = LoopSettings(
        name="byte trunk training",
        epochs=settings.epochs,
        lr=settings.lr,
        weight_decay=0.01,
        clip_norm=1.0,
        schedule="one_cycle",
        warmup=0.1,
        progress=settings.progress,
    )
    done = train_loop(
        training,
        [*model.parameters(), *heads.parameters(), *bag_heads.parameters(), log_var],
        lambda: _length_batches(lengths, settings.batch_size, rng),
        batch_loss,
        module=model,
    )
    summary = ByteTrainSummary(
        epochs=settings.epochs,
        steps=done.steps,
        seconds=time.perf_counter() - t0,
        losses=done.losses,
    )
    summary.task_weights = {
        n: weights[n] * (float(torch.exp(-log_var[k]).detach()) if uncertainty else 1.0 / chance[n])
        for k, n in enumerate(names)
    }
    state = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
    if config.bag and config.int8:
        state["bag.q"], state["bag.scale"] = quantize_rows(state.pop("bag.weight"))
    return ByteTrunk(config, state=state), summary


def _float_state(trunk: ByteTrunk) -> dict[str, np.ndarray]:
    """``trunk``'s weights as the training module holds them (an int8 bag as floats)."""
    state = dict(trunk.state())
    if "bag.q" in state:
        q, scale = state.pop("bag.q"), state.pop("bag.scale")
        state["bag.weight"] = q.astype(np.float32) * scale[:, None]
    return state
