"""``LossScaler``: dynamic loss scaling for float16 training, over ``torch.amp.GradScaler``.

float16's smallest normal number is about 6e-5, so small gradients flowing back through a
float16 forward underflow to zero. Scaling the loss by ``S`` (starting at 2**16) scales every
gradient by ``S``; the gradients are divided by ``S`` again before the update. When a
gradient comes out inf or NaN, the scale was too large: that step is skipped (no parameter,
optimizer state or step counter changes) and ``S`` is halved; after ``growth_interval`` finite
steps in a row it doubles. torch's ``GradScaler`` keeps that state and makes those decisions;
this class feeds it sonnx's gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

__all__ = ["GROWTH_TRACKER", "SCALE", "LossScaler"]

#: the keys of the scaler's entries in ``Optimizer.get_states()``.
SCALE = "loss_scale"
GROWTH_TRACKER = "loss_scale_growth_tracker"


class _Step:
    """What ``GradScaler.step`` drives: ``param_groups`` whose tensors carry ``.grad``, and a
    ``step()`` it calls only when every gradient is finite."""

    def __init__(self, params: list[torch.Tensor], apply: Callable[[], None]) -> None:
        self.param_groups = [{"params": params}]
        self._apply = apply

    def step(self) -> bool:
        self._apply()
        return True


class LossScaler:
    """Scale the loss, unscale and check the gradients, skip overflowing steps.

    An :class:`~sonnx.opt.Optimizer` with a ``loss_scaler`` (``Model.compile(...,
    precision="fp16")`` attaches one) uses it in ``optimizer(loss)`` and in every
    :class:`~sonnx.opt.DistOpt` mode. The arguments are ``torch.amp.GradScaler``'s.
    """

    def __init__(
        self,
        device_type: str,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ) -> None:
        if not init_scale > 0 or not growth_factor > 1 or not 0 < backoff_factor < 1:
            raise BadInputError(
                "LossScaler: expected init_scale > 0, growth_factor > 1 and 0 < backoff_factor "
                f"< 1, received {init_scale}, {growth_factor}, {backoff_factor}"
            )
        if not isinstance(growth_interval, int) or growth_interval < 1:
            raise BadInputError(
                f"LossScaler: growth_interval must be a positive int, received {growth_interval!r}"
            )
        self._scaler = torch.amp.GradScaler(
            device_type,
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
        )
        #: how many steps were skipped because a gradient was inf or NaN.
        self.skipped_steps = 0

    @property
    def scale(self) -> float:
        """The current loss scale (a host read)."""
        return float(self._scaler.get_scale())

    def loss_gradient(self, loss: torch.Tensor) -> torch.Tensor:
        """``d(scaled loss)/d(loss)``: the ``dy`` to back-propagate from ``loss``."""
        return self._scaler.scale(torch.ones_like(loss)).to(loss.dtype)

    def step(
        self, params: list[Tensor], grads: list[torch.Tensor], apply: Callable[[], None]
    ) -> bool:
        """Unscale ``grads`` in place and call ``apply`` (the update) unless one of them is inf
        or NaN; then adjust the scale. Returns whether the update was applied."""
        if not params:  # nothing to check: GradScaler needs at least one gradient
            apply()
            return True
        for p, g in zip(params, grads, strict=True):
            if g.dtype == torch.float16:
                raise BadInputError(
                    f"LossScaler: parameter {p.name or tuple(p.shape)} is float16; fp16 training "
                    "keeps float32 parameters (autocast casts them per operation), so build or "
                    "import the model in float32"
                )
        data = [p.data for p in params]
        for p, g in zip(data, grads, strict=True):
            p.grad = g  # GradScaler reads the gradients from .grad
        try:
            applied = self._scaler.step(_Step(data, apply)) is not None
        finally:
            for p in data:
                p.grad = None
        self._scaler.update()
        self.skipped_steps += not applied
        return applied

    def get_states(self) -> dict[str, torch.Tensor]:
        """The scale and the count of finite steps since it last changed."""
        state = self._scaler.state_dict()
        # host: a number saved with the optimizer's states, not one a device computes with
        scale = torch.tensor(state["scale"], dtype=torch.float32)
        # host: likewise
        tracker = torch.tensor(state["_growth_tracker"], dtype=torch.int64)
        return {SCALE: scale, GROWTH_TRACKER: tracker}

    def set_states(self, states: Mapping[str, Any]) -> None:
        """Restore what :meth:`get_states` returned (values as tensors or numbers)."""
        missing = [k for k in (SCALE, GROWTH_TRACKER) if k not in states]
        if missing:
            raise BadInputError(
                f"LossScaler.set_states: expected entries {missing}, received keys {sorted(states)}"
            )
        state = self._scaler.state_dict()
        state["scale"] = float(_number(states[SCALE]))
        state["_growth_tracker"] = int(_number(states[GROWTH_TRACKER]))
        self._scaler.load_state_dict(state)


def _number(value: Any) -> float | int:
    if isinstance(value, Tensor):
        value = value.data
    if isinstance(value, torch.Tensor):
        return value.item()
    return value.item() if hasattr(value, "item") else value
