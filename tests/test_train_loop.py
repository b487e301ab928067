"""The one torch training loop (heads/nn.train_loop) on a tiny regression."""

from __future__ import annotations

from typing import Any

import pytest

from manyheads import ConfigError
from manyheads.heads.nn import LoopSettings, seeded, shuffled, train_loop

torch = pytest.importorskip("torch")


def _problem(n: int = 40) -> tuple[Any, Any, Any]:
    """A linear layer and rows of y = 3x + 1 (with a seeded start)."""
    with seeded(0):
        layer = torch.nn.Linear(1, 1)
        x = torch.randn(n, 1)
    return layer, x, 3 * x + 1


def _loss(layer: Any, x: Any, y: Any) -> Any:
    return lambda rows: torch.nn.functional.mse_loss(layer(x[rows]), y[rows])


def test_trains_steps_and_reports_each_epochs_mean_loss() -> None:
    layer, x, y = _problem()
    with seeded(1) as generator:
        done = train_loop(
            LoopSettings("regression", epochs=30, lr=0.1),
            list(layer.parameters()),
            shuffled(40, 8, generator),
            _loss(layer, x, y),
        )
    assert done.epochs == done.best_epoch == 30 and done.steps == 30 * 5
    assert len(done.losses) == 30 and done.losses[-1] < 0.01 * done.losses[0]
    assert abs(layer.weight.detach().item() - 3) < 0.1 and abs(layer.bias.detach().item() - 1) < 0.1


def test_a_batch_without_a_loss_takes_no_step_but_counts_its_rows() -> None:
    layer, x, y = _problem()
    loss = _loss(layer, x, y)
    batches = [torch.arange(0, 20), torch.arange(20, 40)]
    done = train_loop(
        LoopSettings("regression", epochs=2, lr=0.01),
        list(layer.parameters()),
        lambda: batches,
        lambda rows: None if rows[0] >= 20 else loss(rows),
    )
    assert done.steps == 2
    first = loss(batches[0])  # after training: below the first epoch's mean over 40 rows
    assert float(first.detach()) * 20 / 40 < done.losses[0]


def test_early_stopping_keeps_the_best_epochs_weights() -> None:
    layer, x, y = _problem()
    scores = iter([5.0, 4.0, 4.5, 4.1, 4.2, 3.0])
    kept: dict[int, list[float]] = {}

    def validation() -> float:
        kept[len(kept) + 1] = [layer.weight.detach().item(), layer.bias.detach().item()]
        return next(scores)

    with seeded(1) as generator:
        done = train_loop(
            LoopSettings("regression", epochs=10, lr=0.1, patience=3),
            list(layer.parameters()),
            shuffled(40, 8, generator),
            _loss(layer, x, y),
            validation_loss=validation,
        )
    assert (done.epochs, done.best_epoch) == (5, 2)
    assert [layer.weight.detach().item(), layer.bias.detach().item()] == kept[2]


def test_warmup_schedule_and_clipping() -> None:
    layer, x, y = _problem()
    seen: list[float] = []
    loss = _loss(layer, x, y)
    settings = LoopSettings(
        "regression", epochs=2, lr=1.0, clip_norm=1e-3, schedule="warmup", warmup=0.5
    )

    def spy(rows: Any) -> Any:
        seen.append(layer.weight.detach().item())
        return loss(rows)

    train_loop(settings, list(layer.parameters()), lambda: [torch.arange(40)] * 2, spy)
    # 4 steps, 2 of warm-up: learning rates 0.5, 1, 1, 0.5 (AdamW's first step is lr)
    assert abs(seen[1] - seen[0]) == pytest.approx(0.5, rel=1e-3)
    # the last step's gradients, as clipped
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in layer.parameters()]))
    assert float(norm) == pytest.approx(1e-3, rel=1e-3)


def test_a_loss_that_is_not_finite_names_the_learning_rate() -> None:
    layer, x, y = _problem()
    settings = LoopSettings("probing", epochs=3, lr=0.5, lr_name="head_lr")
    with pytest.raises(ConfigError) as caught:
        train_loop(
            settings,
            list(layer.parameters()),
            lambda: [torch.arange(40)],
            lambda rows: _loss(layer, x, y)(rows) * float("nan"),
        )
    assert str(caught.value) == "probing diverged in epoch 1 (loss nan); lower head_lr (now 0.5)"
    assert caught.value.render(lambda name: f"--{name.replace('_', '-')}").endswith(
        "lower --head-lr (now 0.5)"
    )


@pytest.mark.parametrize("steps", [1, 2, 5, 19])
def test_a_one_cycle_schedule_takes_a_run_of_a_few_steps(steps: int) -> None:
    layer, x, y = _problem(steps * 8)
    with seeded(1) as generator:
        done = train_loop(
            LoopSettings("regression", epochs=1, lr=0.1, schedule="one_cycle"),
            list(layer.parameters()),
            shuffled(steps * 8, 8, generator),
            _loss(layer, x, y),
        )
    assert done.steps == steps
