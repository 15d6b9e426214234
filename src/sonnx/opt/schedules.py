"""Learning-rate schedules: callables from the optimizer's step counter to a learning rate.

A schedule can be passed wherever an optimizer takes ``lr``. Step ``t`` counts completed
``Optimizer.step()`` calls, so the first update uses ``schedule(0)`` — the same convention as
calling a ``torch.optim.lr_scheduler`` after each ``optimizer.step()``.
"""

from __future__ import annotations

import math

from sonnx.errors import BadInputError
from sonnx.opt.checks import in_unit_interval, non_negative, number, positive_int

__all__ = [
    "Constant",
    "CosineDecay",
    "DecayScheduler",
    "ExponentialDecay",
    "StepDecay",
    "as_schedule",
]


class DecayScheduler:
    """Base class: ``schedule(step) -> learning rate``; ``init_value`` is the rate at step 0.

    :param init_value: the rate at step 0, >= 0.
    :raises BadInputError: a negative or non-numeric ``init_value``.
    """

    def __init__(self, init_value: float) -> None:
        self.init_value = non_negative(type(self).__name__, "init_value", init_value)

    def __call__(self, step: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} does not define __call__(step)")

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({shown})"


class Constant(DecayScheduler):
    """The same rate at every step.

    :param init_value: the rate, >= 0.
    """

    def __call__(self, step: int) -> float:
        return self.init_value


class ExponentialDecay(DecayScheduler):
    """``init_value * decay_rate ** (step / decay_steps)``; the exponent is floored when
    ``staircase`` (so the rate drops every ``decay_steps`` steps, as TensorFlow/SINGA define it).

    :param init_value: the rate at step 0, >= 0.
    :param decay_steps: the steps over which the rate is multiplied by ``decay_rate``, > 0.
    :param decay_rate: the factor, > 0.
    :param staircase: drop the rate in steps instead of continuously.
    :raises BadInputError: a value outside its range.
    """

    def __init__(
        self, init_value: float, decay_steps: int, decay_rate: float, staircase: bool = False
    ) -> None:
        super().__init__(init_value)
        name = type(self).__name__
        self.decay_steps = positive_int(name, "decay_steps", decay_steps)
        self.decay_rate = number(name, "decay_rate", decay_rate)
        if self.decay_rate <= 0:
            raise BadInputError(f"{name}: decay_rate must be > 0, received {decay_rate!r}")
        self.staircase = bool(staircase)

    def __call__(self, step: int) -> float:
        exponent = step // self.decay_steps if self.staircase else step / self.decay_steps
        return self.init_value * self.decay_rate**exponent


class StepDecay(DecayScheduler):
    """``init_value * gamma ** (step // step_size)`` (``torch.optim.lr_scheduler.StepLR``).

    :param init_value: the rate at step 0, >= 0.
    :param step_size: the steps between drops, > 0.
    :param gamma: the factor of each drop, >= 0.
    :raises BadInputError: a value outside its range.
    """

    def __init__(self, init_value: float, step_size: int, gamma: float = 0.1) -> None:
        super().__init__(init_value)
        name = type(self).__name__
        self.step_size = positive_int(name, "step_size", step_size)
        self.gamma = non_negative(name, "gamma", gamma)

    def __call__(self, step: int) -> float:
        return self.init_value * self.gamma ** (step // self.step_size)


class CosineDecay(DecayScheduler):
    """Half a cosine from ``init_value`` down to ``alpha * init_value`` over ``decay_steps``
    steps, then constant (TensorFlow's ``CosineDecay``; within ``decay_steps`` it equals
    ``torch.optim.lr_scheduler.CosineAnnealingLR(T_max=decay_steps, eta_min=alpha * init)``).

    :param init_value: the rate at step 0, >= 0.
    :param decay_steps: the steps the decay takes, > 0.
    :param alpha: the final rate as a fraction of ``init_value``, in [0, 1].
    :raises BadInputError: a value outside its range.
    """

    def __init__(self, init_value: float, decay_steps: int, alpha: float = 0.0) -> None:
        super().__init__(init_value)
        name = type(self).__name__
        self.decay_steps = positive_int(name, "decay_steps", decay_steps)
        self.alpha = in_unit_interval(name, "alpha", alpha, closed=True)

    def __call__(self, step: int) -> float:
        t = min(step, self.decay_steps)
        floor = self.alpha * self.init_value
        cosine = (1 + math.cos(math.pi * t / self.decay_steps)) / 2
        return floor + (self.init_value - floor) * cosine


def as_schedule(lr: float | DecayScheduler, owner: str) -> DecayScheduler:
    """A learning rate given as a number becomes a :class:`Constant` schedule."""
    if isinstance(lr, DecayScheduler):
        return lr
    if isinstance(lr, bool) or not isinstance(lr, (int, float)):
        raise BadInputError(
            f"{owner}: lr must be a non-negative number or a schedule from sonnx.opt "
            f"(Constant, ExponentialDecay, StepDecay, CosineDecay), received {lr!r}"
        )
    if not math.isfinite(lr) or lr < 0:
        raise BadInputError(f"{owner}: lr must be a finite number >= 0, received {lr!r}")
    return Constant(lr)
