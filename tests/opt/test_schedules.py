"""Learning-rate schedules: values, trajectories against torch.optim.lr_scheduler, validation."""

from __future__ import annotations

import math

import pytest
import torch
from torch.optim import lr_scheduler

from sonnx import opt
from sonnx.errors import BadInputError
from tests.opt.test_optimizers import (
    STEPS,
    assert_same,
    sonnx_params,
    sonnx_step,
    torch_trajectory,
)

# (sonnx schedule, torch scheduler factory) with SGD+momentum at the same initial rate 0.02.
SCHEDULES = {
    "constant": (opt.Constant(0.02), None),
    "exponential": (
        opt.ExponentialDecay(0.02, decay_steps=1, decay_rate=0.9),
        lambda o: lr_scheduler.ExponentialLR(o, gamma=0.9),
    ),
    "exponential-smooth": (
        opt.ExponentialDecay(0.02, decay_steps=4, decay_rate=0.5),
        lambda o: lr_scheduler.LambdaLR(o, lambda s: 0.5 ** (s / 4)),
    ),
    "exponential-staircase": (
        opt.ExponentialDecay(0.02, decay_steps=3, decay_rate=0.5, staircase=True),
        lambda o: lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
    ),
    "step": (
        opt.StepDecay(0.02, step_size=5, gamma=0.3),
        lambda o: lr_scheduler.StepLR(o, step_size=5, gamma=0.3),
    ),
    "cosine": (
        opt.CosineDecay(0.02, decay_steps=STEPS, alpha=0.1),
        lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=STEPS, eta_min=0.002),
    ),
}


@pytest.mark.parametrize("case", sorted(SCHEDULES))
def test_schedule_trajectory_matches_torch(case):
    schedule, torch_scheduler = SCHEDULES[case]
    optimizer, params = opt.SGD(schedule, momentum=0.9), sonnx_params()
    expected = torch_trajectory(
        lambda ps: torch.optim.SGD(ps, lr=0.02, momentum=0.9), torch_scheduler
    )
    for step, theirs in enumerate(expected):
        sonnx_step(optimizer, params)
        assert_same(params, theirs, step)


def test_schedule_values():
    assert opt.ExponentialDecay(1.0, 10, 0.5)(5) == pytest.approx(math.sqrt(0.5))
    assert opt.ExponentialDecay(1.0, 10, 0.5, staircase=True)(19) == 0.5
    assert opt.StepDecay(2.0, step_size=3)(6) == pytest.approx(0.02)
    cosine = opt.CosineDecay(1.0, decay_steps=10, alpha=0.2)
    assert cosine(0) == 1.0
    assert cosine(5) == pytest.approx(0.6)
    assert cosine(10) == pytest.approx(0.2)
    assert cosine(50) == pytest.approx(0.2)


def test_schedule_works_with_adam():
    schedule = opt.StepDecay(0.05, step_size=4, gamma=0.5)
    optimizer, params = opt.Adam(schedule), sonnx_params()
    expected = torch_trajectory(
        lambda ps: torch.optim.Adam(ps, lr=0.05), lambda o: lr_scheduler.StepLR(o, 4, 0.5)
    )
    for step, theirs in enumerate(expected):
        sonnx_step(optimizer, params)
        assert_same(params, theirs, step)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: opt.Constant(-1.0), "Constant: init_value must be >= 0"),
        (lambda: opt.ExponentialDecay(0.1, 0, 0.5), "decay_steps must be a positive integer"),
        (lambda: opt.ExponentialDecay(0.1, 2.5, 0.5), "decay_steps must be a positive integer"),
        (lambda: opt.ExponentialDecay(0.1, 2, 0.0), "decay_rate must be > 0"),
        (lambda: opt.StepDecay(0.1, step_size=-2), "step_size must be a positive integer"),
        (lambda: opt.StepDecay(0.1, 2, gamma=-0.5), "gamma must be >= 0"),
        (lambda: opt.CosineDecay(0.1, 10, alpha=1.5), r"alpha must be in \[0, 1\]"),
        (lambda: opt.CosineDecay(float("inf"), 10), "init_value must be finite"),
    ],
)
def test_invalid_schedules(make, message):
    with pytest.raises(BadInputError, match=message):
        make()
