"""A one-hidden-layer MLP head on trunk embeddings (scikit-learn estimator contract).

Training needs torch (the ``transformers`` extra); prediction is plain numpy, so a
bundle with MLP heads answers without torch installed. Targets, class weights,
temperature scaling and thresholds are handled exactly as in
:class:`~manyheads.heads.linear.LinearHead`.
"""

from __future__ import annotations

import contextlib
import numbers
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.validation import check_array, check_is_fitted

from .._settings import Rule, Settings
from ..errors import ConfigError, DataError, require
from .base import HeadBase
from .kinds import PATH_SEP
from .nn import LoopSettings, seeded, shuffled, task_loss, train_loop
from .record import check_record

__all__ = ["MLPHead", "MLPTraining", "mlp_head_from_record", "mlp_head_to_record"]

_MIN_HOLDOUT = 5  # fewer internal validation rows than this: no internal hold-out
_THREADED_STEP_MACS = 2**28  # smaller minibatch steps (batch * d * hidden) run on one thread
_PARAM_NAMES = (
    "hidden",
    "dropout",
    "validation_fraction",
    "class_weight",
    "calibrate",
    "thresholds",
    "random_state",
)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


_COUNT = Rule(lambda v: _is_int(v) and v >= 1, "an integer >= 1")


@dataclass(frozen=True)
class MLPTraining(Settings):
    """How an MLP head's weights are trained, each setting checked when made.

    ``lr``, ``weight_decay``: AdamW's learning rate (> 0) and decoupled weight decay
    (>= 0; applied to the weight matrices, not to the biases). ``max_epochs``: at most
    this many passes over the training rows. ``patience``: early stopping, after that
    many epochs whose validation loss is no better than the best so far (the best
    epoch's weights are kept). ``batch_size``: rows of a minibatch (the validation loss
    is computed in one full batch).
    """

    lr: float = 1e-3
    weight_decay: float = 1e-4
    max_epochs: int = 200
    patience: int = 10
    batch_size: int = 256

    _constraints: ClassVar[Mapping[str, Rule]] = {
        "max_epochs": _COUNT,
        "patience": _COUNT,
        "batch_size": _COUNT,
        "lr": Rule(lambda v: _is_real(v) and 0 < v < np.inf, "a positive finite number"),
        "weight_decay": Rule(lambda v: _is_real(v) and 0 <= v < np.inf, "a finite number >= 0"),
    }


@contextlib.contextmanager
def _torch_threads(torch: Any, step_macs: int) -> Iterator[None]:
    """Train on one torch thread when a minibatch step is small; restore the count after.

    A step of a typical head (batch 256, 384-2048 features, 256 hidden units) is
    25-135 million multiply-adds: more threads gain little on an idle machine,
    and where other processes keep the cores busy OpenMP's barriers make each
    step 5-30x slower (2 cores, one busy: a 256x384 @ 384x256 product takes
    0.5 ms on one thread, 8-16 ms on two). Larger steps keep torch's setting.
    """
    before = torch.get_num_threads()
    if step_macs >= _THREADED_STEP_MACS or before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class MLPHead(HeadBase):
    """Linear -> ReLU -> Dropout -> Linear on L2-normalised embeddings.

    Parameters
    ----------
    kind : {"multiclass", "binary", "multilabel", "hierarchical"}
        As for :class:`~manyheads.heads.linear.LinearHead`: softmax over K
        classes; one sigmoid output with ``classes_[1]`` the positive class;
        one sigmoid per label (targets as label lists or a 0/1 indicator matrix).
    hidden : int
        Width of the hidden layer (>= 1).
    dropout : float
        Dropout on the hidden layer during training, in [0, 1).
    training : MLPTraining or None
        How the weights are trained: AdamW's ``lr`` and ``weight_decay``,
        ``max_epochs``, early stopping's ``patience``, ``batch_size`` (None: each
        at its default). A head's record keeps them among its other parameters.
    validation_fraction : float
        In [0, 1). Only used when :meth:`fit` gets no validation data (or none of
        its rows has a label seen in training): this fraction of the training
        rows (stratified by class for multiclass / binary, every class keeping
        at least one training row) is held out, not trained on, and used for
        early stopping and then for the temperature and thresholds. With 0, or
        when the hold-out would have fewer than 5 rows, nothing is held out:
        the head trains ``training.max_epochs`` epochs, temperature 1, thresholds 0.5.
    class_weight : None, "balanced" or dict
        As for LinearHead: weight classes inversely to their frequency
        (multilabel: each label's positives by neg/pos, clipped to [1, 100]).
    calibrate : bool
        Fit a temperature on the validation data.
    random_state : int or None
        Seeds the weight initialisation, dropout, shuffling and the internal
        hold-out; the same seed gives the same weights (same machine, same torch
        thread count). The global torch random state is left as it was.

    Training runs on one torch thread while ``batch_size * d * hidden`` is below
    2**28 (torch's thread count is restored afterwards); inputs are centred and
    scaled to unit mean variance for training, folded into ``W1_`` / ``b1_``.

    Learned attributes: ``classes_``, ``W1_`` (d x hidden), ``b1_``, ``W2_``
    (hidden x outputs), ``b2_`` (all float32), ``temperature_``, ``thresholds_``
    (binary: (1,), multilabel: (L,), multiclass: (1,) unused 0.5),
    ``n_features_in_``, ``n_epochs_`` (epochs run) and ``best_epoch_`` (1-based
    epoch whose weights were kept).
    """

    classes_: np.ndarray
    W1_: np.ndarray
    b1_: np.ndarray
    W2_: np.ndarray
    b2_: np.ndarray
    temperature_: float
    thresholds_: np.ndarray
    n_features_in_: int
    n_epochs_: int
    best_epoch_: int

    def __init__(
        self,
        kind: str = "multiclass",
        hidden: int = 256,
        dropout: float = 0.2,
        training: MLPTraining | None = None,
        validation_fraction: float = 0.1,
        class_weight: str | dict[Any, float] | None = None,
        calibrate: bool = True,
        thresholds: str = "f1",
        random_state: int | None = 0,
        path_sep: str = PATH_SEP,
    ) -> None:
        self.kind, self.hidden, self.dropout, self.training = kind, hidden, dropout, training
        self.path_sep = path_sep
        self.validation_fraction = validation_fraction
        self.class_weight, self.calibrate, self.thresholds = class_weight, calibrate, thresholds
        self.random_state = random_state

    def _training_settings(self) -> MLPTraining:
        """``training``, or the defaults when it is None."""
        return MLPTraining() if self.training is None else self.training

    # -- parameters and targets ----------------------------------------------

    def check_params(self) -> None:
        """Refuse (:class:`ConfigError`, naming the setting) a setting out of its range."""
        self._check_common()
        _COUNT.check("hidden", self.hidden)
        if not (self.training is None or isinstance(self.training, MLPTraining)):
            raise ConfigError(f"training must be None or an MLPTraining, got {self.training!r}")
        if not _is_real(self.dropout) or not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be a number in [0, 1), got {self.dropout!r}")
        if not _is_real(self.validation_fraction) or not 0 <= self.validation_fraction < 1:
            raise ConfigError(
                f"validation_fraction must be a number in [0, 1), got {self.validation_fraction!r}"
            )
        if self.random_state is not None and (
            not _is_int(self.random_state) or not 0 <= self.random_state < 2**63
        ):
            raise ConfigError(
                f"random_state must be None or an integer in [0, 2**63), got {self.random_state!r}"
            )

    def _output_weights(self, target: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(per-class weights, per-label positive weights)`` from ``class_weight``."""
        if self.class_weight is None:
            return None, None
        if self.head_kind.is_set:
            if self.class_weight == "balanced":
                pos = target.sum(0)
                neg = target.shape[0] - pos
                return None, np.clip(neg / np.maximum(pos, 1), 1.0, 100.0)
            assert isinstance(self.class_weight, dict)
            return None, np.array(
                [float(self.class_weight.get(c, 1.0)) for c in self.classes_.tolist()]
            )
        # the per-sample weights LinearHead uses, as one weight per class
        sw = compute_sample_weight(self.class_weight, self.classes_[target])
        per_class = np.ones(len(self.classes_))
        per_class[target] = sw
        return per_class, None

    def _holdout(self, target: np.ndarray, seed: int) -> np.ndarray | None:
        """Boolean mask of internally held-out rows, or None when nothing is held out."""
        n = target.shape[0]
        frac = float(self.validation_fraction)
        if frac <= 0 or n * frac < _MIN_HOLDOUT:
            return None
        rng = np.random.default_rng(seed)
        perm = rng.permutation(n)
        mask = np.zeros(n, dtype=bool)
        if self.head_kind.is_set:
            mask[perm[: round(n * frac)]] = True
        else:
            # stratified: random order within each class, stochastic rounding of
            # each class's share, and every class keeps a training row
            order = perm[np.argsort(target[perm], kind="stable")]
            counts = np.bincount(target, minlength=len(self.classes_))
            take = np.floor(counts * frac + rng.random(len(counts))).astype(np.int64)
            take = np.minimum(take, np.maximum(counts - 1, 0))
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
            rank = np.arange(n) - np.repeat(starts, counts)
            mask[order[rank < np.repeat(take, counts)]] = True
        if mask.sum() < _MIN_HOLDOUT:
            return None
        return mask

    # -- fitting ---------------------------------------------------------------

    def fit(self, X: Any, y: Any, *, X_val: Any = None, y_val: Any = None) -> MLPHead:
        """Train on ``X`` (n x d embeddings) and ``y``, early-stopping on ``(X_val, y_val)``.

        The temperature (if ``calibrate``) and the binary / multilabel thresholds
        are then fitted on the validation data; see ``validation_fraction`` for
        what happens without it. Needs torch.
        """
        X, target = self._fit_start(X, y)
        X = np.ascontiguousarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float32)
        self.n_features_in_ = X.shape[1]
        seed = (
            int(np.random.default_rng().integers(2**62))
            if self.random_state is None
            else int(self.random_state)
        )

        Xv: np.ndarray | None = None
        tv: np.ndarray | None = None
        if X_val is not None and y_val is not None and len(y_val) > 0:
            Xv, tv = self._known_validation(
                check_array(X_val, accept_sparse="csr", dtype=(np.float32, np.float64)), y_val
            )
            if Xv.shape[1] != self.n_features_in_:
                raise DataError(f"X_val has {Xv.shape[1]} features but X has {self.n_features_in_}")
            if len(tv) == 0:
                Xv = tv = None
        if Xv is None:
            held = self._holdout(target, seed)
            if held is not None:
                Xv, tv = X[held], target[held]
                X, target = X[~held], target[~held]
        if Xv is not None:
            Xv = np.ascontiguousarray(
                Xv.toarray() if hasattr(Xv, "toarray") else Xv, dtype=np.float32
            )

        class_w, pos_w = self._output_weights(target)
        self._train(X, target, Xv, tv, class_w, pos_w, seed)

        self.temperature_ = 1.0
        n_thr = self.head_kind.n_thresholds(len(self.classes_))
        self.thresholds_ = np.full(n_thr, 0.5, dtype=np.float32)
        if Xv is not None and tv is not None:
            self._calibrate(Xv, tv)
        return self

    def _train(
        self,
        X: np.ndarray,
        target: np.ndarray,
        Xv: np.ndarray | None,
        tv: np.ndarray | None,
        class_w: np.ndarray | None,
        pos_w: np.ndarray | None,
        seed: int,
    ) -> None:
        torch: Any = require("torch", "transformers")
        n, d = X.shape
        n_out = self.head_kind.n_outputs(len(self.classes_))
        kind = self.kind

        with warnings.catch_warnings():
            # read-only arrays (memory maps, safetensors) are never written to here
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            X_t = torch.from_numpy(X)
            Xv_t = None if Xv is None else torch.from_numpy(Xv)
        dtype = self.head_kind.target_dtype()  # class indices, or 0/1 as floats
        y_t = torch.from_numpy(np.ascontiguousarray(target, dtype=dtype))
        yv_t = None if tv is None else torch.from_numpy(np.asarray(tv, dtype=dtype))
        cw_t = None if class_w is None else torch.from_numpy(class_w.astype(np.float32))
        pw_t = None if pos_w is None else torch.from_numpy(pos_w.astype(np.float32))

        def loss_fn(logits: Any, t: Any) -> Any:
            return task_loss(kind, logits, t, class_weight=cw_t, pos_weight=pw_t)

        # Inputs are centred and scaled to unit mean variance for training (L2-normalised
        # embeddings have coordinates of ~1/sqrt(d) and a large common mean, which makes
        # AdamW with default initialisation crawl); the transform is folded into W1_ / b1_.
        var, mu_t = torch.var_mean(X_t, dim=0, correction=0)
        spread = float(var.mean())
        scale = 1.0 / np.sqrt(spread) if spread > 0 and np.isfinite(spread) else 1.0
        Xv_s = None if Xv_t is None else (Xv_t - mu_t) * scale

        training = self._training_settings()
        hidden, batch = int(self.hidden), int(training.batch_size)
        with seeded(seed) as generator, _torch_threads(torch, batch * d * hidden):
            first = torch.nn.Linear(d, hidden)
            second = torch.nn.Linear(hidden, n_out)
            model = torch.nn.Sequential(
                first, torch.nn.ReLU(), torch.nn.Dropout(float(self.dropout)), second
            )
            settings = LoopSettings(
                name="MLP head training",
                epochs=int(training.max_epochs),
                lr=float(training.lr),
                weight_decay=training.weight_decay,
                patience=int(training.patience),
            )
            done = train_loop(
                settings,
                [
                    {"params": [first.weight, second.weight]},
                    {"params": [first.bias, second.bias], "weight_decay": 0.0},
                ],
                shuffled(n, batch, generator),
                lambda rows: loss_fn(model((X_t[rows] - mu_t) * scale), y_t[rows]),
                validation_loss=None if Xv_s is None else lambda: loss_fn(model(Xv_s), yv_t),
                module=model,
            )
        self.n_epochs_, self.best_epoch_ = done.epochs, done.best_epoch
        best_state = [p.detach() for p in (first.weight, first.bias, second.weight, second.bias)]
        W1, b1, W2, b2 = (t.numpy().astype(np.float64) for t in best_state)
        mu = mu_t.numpy().astype(np.float64)
        # relu(((x - mu) * scale) @ W1.T + b1) == relu(x @ (scale * W1.T) + (b1 - scale * W1 @ mu))
        self.W1_ = np.ascontiguousarray(scale * W1.T, dtype=np.float32)
        self.b1_ = (b1 - scale * (W1 @ mu)).astype(np.float32)
        self.W2_ = np.ascontiguousarray(W2.T, dtype=np.float32)
        self.b2_ = b2.astype(np.float32)

    def calibrate_on(self, X_val: Any, y_val: Any) -> MLPHead:
        """Fit the temperature (if ``calibrate``) and the thresholds on validation data.

        Rows whose label was not seen in training are dropped (multilabel: the
        unseen labels are); with no row left nothing changes.
        """
        check_is_fitted(self, "W1_")
        X_val = check_array(X_val, accept_sparse="csr", dtype=(np.float32, np.float64))
        X_val, target = self._known_validation(X_val, y_val)
        return self._calibrate(X_val, target)

    # -- prediction (numpy only) -----------------------------------------------

    def _logits(self, X: Any) -> np.ndarray:
        H = np.asarray(X @ self.W1_, dtype=np.float32)
        H += self.b1_
        np.maximum(H, 0, out=H)
        z = H @ self.W2_
        z += self.b2_
        return z


def mlp_head_to_record(head: MLPHead) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The JSON-ready description of a fitted MLP head and its weight tensors."""
    check_is_fitted(head, "W1_")
    flat = {**head.get_params(deep=False), **head._training_settings().values()}
    flat.pop("kind", None)
    flat.pop("training", None)
    params = dict(sorted(flat.items()))
    record = {
        "type": "mlp",
        **head._record_fields(),
        "params": params,
        "n_epochs": int(head.n_epochs_),
        "best_epoch": int(head.best_epoch_),
    }
    tensors = {
        name: np.ascontiguousarray(getattr(head, f"{name}_"), dtype=np.float32)
        for name in ("W1", "b1", "W2", "b2")
    }
    return record, tensors


def mlp_head_from_record(record: dict[str, Any], tensors: dict[str, np.ndarray]) -> MLPHead:
    """Rebuild a fitted MLP head from :func:`mlp_head_to_record` output; checks every
    field (:func:`~manyheads.heads.record.check_record`) and shape."""
    found = record.get("type", "linear") if isinstance(record, dict) else None
    if found != "mlp":
        raise DataError(f"head record has type {found!r}, expected 'mlp'")
    checked = check_record(record, tensors)
    kind, labels = checked.kind, checked.labels
    params = dict(record.get("params") or {})
    try:
        training = MLPTraining(**{k: v for k, v in params.items() if k in MLPTraining.names()})
        head = MLPHead(
            kind=kind,
            training=training,
            **{k: v for k, v in params.items() if k in _PARAM_NAMES},
        )
        head.check_params()
    except ConfigError as exc:
        raise DataError(f"MLP head record has a bad parameter: {exc}") from exc
    W1, b1, W2, b2 = (checked.tensors[name] for name in ("W1", "b1", "W2", "b2"))
    if "hidden" in params and params["hidden"] != W1.shape[1]:
        raise DataError(
            f"MLP head weights have shapes W1 {W1.shape}, b1 {b1.shape}, W2 {W2.shape}, "
            f"b2 {b2.shape}; expected (d, h), (h,), (h, {W2.shape[1]}), ({W2.shape[1]},) "
            f"for a {kind} head with {len(labels)} labels and hidden={params['hidden']}"
        )
    head._restore(checked)
    head.W1_, head.b1_, head.W2_, head.b2_ = W1, b1, W2, b2
    head.n_features_in_ = int(W1.shape[0])
    for key in ("n_epochs", "best_epoch"):
        value = record.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise DataError(f"MLP head record: {key!r} must be an integer >= 0, got {value!r}")
    head.n_epochs_ = int(record.get("n_epochs", 0))
    head.best_epoch_ = int(record.get("best_epoch", 0))
    return head
