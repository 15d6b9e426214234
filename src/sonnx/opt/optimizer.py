"""``Optimizer``: the base class every update rule derives from.

An optimizer keeps, per parameter tensor, a small dict of torch tensors (momentum buffers,
moment estimates, step counts) and applies :meth:`Optimizer.update_tensor` — a per-parameter
rule that reads and writes only its arguments — in place on ``param.data`` under
``torch.no_grad()``. :meth:`Optimizer.update` wires a sonnx parameter and gradient to that rule,
so a distributed wrapper can call ``update(param, reduced_grad)`` after its all-reduce.

Hyper-parameters are validated on construction (and for every param group), so a negative
learning rate fails at ``SGD(-0.1)`` and not a hundred steps later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch

from sonnx.errors import BadInputError
from sonnx.opt.loss_scaler import GROWTH_TRACKER, SCALE, LossScaler
from sonnx.opt.schedules import DecayScheduler, as_schedule
from sonnx.tensor import Tensor

__all__ = ["Optimizer"]

State = dict[str, torch.Tensor]
_STEP_COUNTER = "step_counter"


class Optimizer:
    """Base class: subclasses implement :meth:`validate` and :meth:`update_tensor`.

    ``lr`` is a number or a schedule (see :mod:`sonnx.opt.schedules`) evaluated at
    :attr:`step_counter`, the number of :meth:`step` calls so far.

    :attr:`loss_scaler` (None unless float16 training attached one) scales the loss in
    :meth:`backward_and_update` and skips the steps whose gradients overflow; a loop of your
    own over ``autograd.backward(loss)`` and :meth:`update` does not scale.

    ``optimizer(loss)`` is :meth:`backward_and_update`.

    :param lr: the learning rate, a number >= 0 or a schedule.
    :param hyper: the subclass's hyper-parameters by name.
    :raises BadInputError: an ``lr`` that is neither, or hyper-parameters :meth:`validate`
        rejects.
    """

    def __init__(self, lr: float | DecayScheduler, **hyper: Any) -> None:
        self.defaults: dict[str, Any] = self._checked({"lr": lr, **hyper})
        self.step_counter = 0
        # id(param) -> (param, overrides); the tensor is held so that its id stays unique.
        self._groups: dict[int, tuple[Tensor, dict[str, Any]]] = {}
        self._states: dict[int, tuple[Tensor, State]] = {}
        # States loaded by set_states for parameters this optimizer has not updated yet.
        self._pending: dict[str, State] = {}
        self.loss_scaler: LossScaler | None = None

    # ---- the part a subclass writes -------------------------------------------------------
    def validate(self, hp: dict[str, Any]) -> None:
        """Check the hyper-parameters (a subclass's first extension point; the base accepts any).

        Called on construction, for every :meth:`add_param_group` and when :attr:`lr` is set,
        so a bad value fails where it is given, not steps later.

        :param hp: every hyper-parameter by name: the constructor's keyword arguments, and
            ``"lr"`` already made a :class:`~sonnx.opt.DecayScheduler`.
        :raises BadInputError: a value outside its range, or an invalid combination (the
            message names the hyper-parameter and what it received).
        """

    def update_tensor(
        self, p: torch.Tensor, g: torch.Tensor, state: State, lr: float, hp: Mapping[str, Any]
    ) -> None:
        """Apply one update to ``p`` in place from gradient ``g`` (a subclass's second extension
        point, and the one it must write).

        It runs under ``torch.no_grad()`` and uses nothing but its arguments, so a distributed
        wrapper can call it with a reduced gradient. The slots of ``state`` are checkpointed by
        :meth:`get_states` as ``"<param name>:<slot>"``.

        :param p: the parameter's torch tensor, updated in place.
        :param g: its gradient: same shape, device and dtype as ``p``.
        :param state: this parameter's buffers by slot name, empty at its first update; create
            and update them in place (torch tensors only).
        :param lr: the learning rate of this step (the schedule already evaluated).
        :param hp: the hyper-parameters in force for this parameter.
        :raises NotImplementedError: a subclass that does not define it.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define update_tensor()")

    # ---- hyper-parameters -----------------------------------------------------------------
    def _checked(self, hp: dict[str, Any]) -> dict[str, Any]:
        hp = dict(hp)
        hp["lr"] = as_schedule(hp["lr"], type(self).__name__)
        self.validate(hp)
        return hp

    @property
    def lr(self) -> DecayScheduler:
        """The learning-rate schedule (a :class:`~sonnx.opt.Constant` for a plain number)."""
        return self.defaults["lr"]

    @lr.setter
    def lr(self, value: float | DecayScheduler) -> None:
        self.defaults = self._checked({**self.defaults, "lr": value})

    @property
    def lr_value(self) -> float:
        """The learning rate the next update uses."""
        return self.defaults["lr"](self.step_counter)

    def add_param_group(self, params: Iterable[Tensor] | Tensor, **overrides: Any) -> None:
        """Give ``params`` their own hyper-parameters (e.g. ``weight_decay=0`` for biases).

        :param params: one parameter or several.
        :param overrides: hyper-parameters by name (``lr`` among them), in force for these
            parameters instead of the defaults.
        :raises BadInputError: an unknown hyper-parameter, an invalid value, or a parameter
            that is not a sonnx Tensor.
        """
        unknown = sorted(set(overrides) - set(self.defaults))
        if unknown:
            raise BadInputError(
                f"{type(self).__name__}: unknown hyper-parameter(s) {unknown}; expected some "
                f"of {sorted(self.defaults)}"
            )
        hp = self._checked({**self.defaults, **overrides})
        chosen = {k: hp[k] for k in overrides}
        for p in [params] if isinstance(params, Tensor) else params:
            if not isinstance(p, Tensor):
                raise BadInputError(
                    f"{type(self).__name__}.add_param_group: expected sonnx Tensors, "
                    f"received {type(p).__name__}"
                )
            self._groups[id(p)] = (p, chosen)

    def hyper_parameters(self, param: Tensor) -> dict[str, Any]:
        """The hyper-parameters in force for ``param`` (defaults plus its group's overrides).

        :param param: a parameter.
        :returns: the hyper-parameters by name, ``"lr"`` as a schedule (the defaults themselves
            for a parameter without a group: do not modify it).
        """
        entry = self._groups.get(id(param))
        if entry is None or entry[0] is not param:
            return self.defaults
        return {**self.defaults, **entry[1]}

    # ---- applying updates -----------------------------------------------------------------
    def update(self, param: Tensor, grad: Tensor | torch.Tensor) -> None:
        """Update one parameter in place from its gradient (does not advance the step).

        :param param: the parameter.
        :param grad: its gradient (cast to the parameter's dtype).
        :raises BadInputError: not a Tensor and a tensor gradient, or a gradient of another
            shape or device.
        """
        g = grad.data if isinstance(grad, Tensor) else grad
        if not isinstance(param, Tensor) or not isinstance(g, torch.Tensor):
            raise BadInputError(
                f"{type(self).__name__}.update: expected (sonnx Tensor, Tensor gradient), "
                f"received ({type(param).__name__}, {type(grad).__name__})"
            )
        p = param.data
        if tuple(g.shape) != tuple(p.shape):
            raise BadInputError(
                f"{type(self).__name__}.update: gradient of {param.name or 'parameter'} must "
                f"have the parameter shape {tuple(p.shape)}, received {tuple(g.shape)}"
            )
        if g.device != p.device:
            raise BadInputError(
                f"{type(self).__name__}.update: gradient of {param.name or 'parameter'} must be "
                f"on the parameter device {p.device}, received {g.device}"
            )
        hp = self.hyper_parameters(param)
        with torch.no_grad():
            self.update_tensor(
                p, g.detach().to(p.dtype), self._state_of(param), hp["lr"](self.step_counter), hp
            )

    def step(self) -> None:
        """Advance the step counter (and with it the learning-rate schedule)."""
        self.step_counter += 1

    def update_tensors(
        self,
        ps: list[torch.Tensor],
        gs: list[torch.Tensor],
        states: list[State],
        lr: float,
        hp: Mapping[str, Any],
    ) -> None:
        """:meth:`update_tensor` for many parameters sharing hyper-parameters, as
        :meth:`backward_and_update` calls it for the parameters without a param group of their
        own; a subclass may override it with torch's multi-tensor (``_foreach``) kernels.

        :param ps: the parameters' torch tensors, updated in place.
        :param gs: their gradients, in the same order.
        :param states: their states (see :meth:`update_tensor`), in the same order.
        :param lr: the learning rate of this step.
        :param hp: the hyper-parameters they share.
        """
        for p, g, state in zip(ps, gs, states, strict=True):
            self.update_tensor(p, g, state, lr, hp)

    def backward_and_update(self, loss: Tensor) -> None:
        """Back-propagate ``loss``, update every parameter it depends on, then :meth:`step`.

        The gradients come straight from torch autograd (parameter shape, device and dtype), so
        they skip :meth:`update`'s checks, and the parameters without a param group of their
        own are updated together by :meth:`update_tensors`. With a :attr:`loss_scaler`, the
        loss is scaled and a step whose gradients overflow changes nothing.

        :param loss: the loss, a scalar Tensor computed in training mode.
        :raises BadInputError: ``loss`` carries no gradient graph (see :meth:`backward`).
        """
        params, grads = self.backward(loss)
        self.guarded_update(params, grads, lambda: self._update_all(params, grads))

    def backward(self, loss: Tensor) -> tuple[list[Tensor], list[torch.Tensor]]:
        """The parameters ``loss`` depends on and their gradients (of the scaled loss when
        there is a :attr:`loss_scaler`: pass them to :meth:`guarded_update`).

        The first half of :meth:`backward_and_update`, for an update loop of one's own (as
        :class:`~sonnx.opt.DistOpt` writes, reducing the gradients in between).

        :param loss: the loss, a scalar Tensor computed in training mode.
        :returns: the parameters (the trainable tensors ``loss`` depends on, unused ones left
            out) and their gradients as torch tensors, in the same order.
        :raises BadInputError: ``loss`` carries no gradient graph (not computed in training
            mode, or by inference-only operators).
        """
        from sonnx.engine.backward import parameter_gradients

        if self.loss_scaler is None:
            return parameter_gradients(loss)
        return parameter_gradients(loss, self.loss_scaler.loss_gradient(loss.data))

    def guarded_update(
        self, params: list[Tensor], grads: list[torch.Tensor], apply: Callable[[], None]
    ) -> None:
        """Run ``apply`` (an update from ``grads``, ending in :meth:`step`): directly, or, with a
        :attr:`loss_scaler`, after unscaling ``grads`` in place and only if all are finite.

        The second half of :meth:`backward_and_update`.

        :param params: the parameters, as :meth:`backward` returned them.
        :param grads: their gradients, as :meth:`backward` returned them.
        :param apply: the update, called with no arguments (skipped for an overflowing step).
        """
        if self.loss_scaler is None:
            apply()
        else:
            self.loss_scaler.step(params, grads, apply)

    def _update_all(self, params: list[Tensor], grads: list[torch.Tensor]) -> None:
        shared: list[tuple[torch.Tensor, torch.Tensor, State]] = []
        with torch.no_grad():
            for param, grad in zip(params, grads, strict=True):
                hp, state = self.hyper_parameters(param), self._state_of(param)
                if hp is self.defaults:
                    shared.append((param.data, grad, state))
                else:
                    self.update_tensor(param.data, grad, state, hp["lr"](self.step_counter), hp)
            if shared:
                ps, gs, states = (list(column) for column in zip(*shared, strict=True))
                self.update_tensors(ps, gs, states, self.lr_value, self.defaults)
        self.step()

    def __call__(self, loss: Tensor) -> None:
        self.backward_and_update(loss)

    def _state_of(self, param: Tensor) -> State:
        entry = self._states.get(id(param))
        if entry is not None and entry[0] is param:
            return entry[1]
        loaded = self._pending.pop(param.name, {}) if param.name is not None else {}
        state = {k: v.to(param.data.device) for k, v in loaded.items()}
        self._states[id(param)] = (param, state)
        return state

    # ---- checkpointing --------------------------------------------------------------------
    def get_states(self) -> dict[str, Tensor]:
        """``{"step_counter": …, "<param name>:<slot>": …}`` as detached copies, plus the
        :attr:`loss_scaler`'s ``loss_scale`` and ``loss_scale_growth_tracker`` when there is one.

        Parameters are identified by name (a Model names its parameters ``conv1.W`` …), so the
        states can be restored into a fresh optimizer over a re-created model.

        :returns: the states by name, for :meth:`set_states` (and ``Model.save_states``'s
            ``aux_states``).
        :raises BadInputError: a parameter with a state has no name.
        """
        # host: a checkpointed Python counter, read back with .item()
        counter = torch.tensor(self.step_counter, dtype=torch.int64)
        states = {_STEP_COUNTER: _as_tensor(counter)}
        if self.loss_scaler is not None:
            states |= {k: _as_tensor(v) for k, v in self.loss_scaler.get_states().items()}
        for name, slots in self._pending.items():
            for slot, value in slots.items():
                states[f"{name}:{slot}"] = _as_tensor(value.clone())
        for param, slots in self._states.values():
            if param.name is None and slots:
                raise BadInputError(
                    f"{type(self).__name__}.get_states: a parameter of shape {param.shape} has "
                    "no name; name it (Tensor.name, or let Layer/Model name their parameters) "
                    "so that its state can be saved"
                )
            for slot, value in slots.items():
                states[f"{param.name}:{slot}"] = _as_tensor(value.detach().clone())
        return states

    def set_states(self, states: Mapping[str, Tensor | torch.Tensor | np.ndarray]) -> None:
        """Restore what :meth:`get_states` returned; per-parameter states bind by name when
        that parameter is next updated. The loss scale is restored into a :attr:`loss_scaler`
        (and ignored without one: training in a precision that needs no scaling).

        :param states: what :meth:`get_states` returned (Tensors, torch tensors or arrays).
        :raises BadInputError: no ``step_counter`` entry, or a key that is not
            ``<param name>:<slot>``.
        """
        if _STEP_COUNTER not in states:
            raise BadInputError(
                f"{type(self).__name__}.set_states: expected a '{_STEP_COUNTER}' entry, "
                f"received keys {sorted(states)}"
            )
        pending: dict[str, State] = {}
        for key, value in states.items():
            if key in (_STEP_COUNTER, SCALE, GROWTH_TRACKER):
                continue
            name, sep, slot = key.rpartition(":")
            if not sep or not name or not slot:
                raise BadInputError(
                    f"{type(self).__name__}.set_states: expected keys '<param name>:<slot>', "
                    f"received {key!r}"
                )
            pending.setdefault(name, {})[slot] = _torch(value).clone()
        self.step_counter = int(_torch(states[_STEP_COUNTER]).item())
        if self.loss_scaler is not None and SCALE in states:
            self.loss_scaler.set_states(states)
        self._states = {}
        self._pending = pending

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({shown})"


def _as_tensor(t: torch.Tensor) -> Tensor:
    return Tensor(data=t, requires_grad=False)


def _torch(value: Tensor | torch.Tensor | np.ndarray) -> torch.Tensor:
    if isinstance(value, Tensor):
        return value.data.detach()
    if isinstance(value, torch.Tensor):
        return value.detach()
    return torch.from_numpy(np.asarray(value))  # host: _state_of moves it to the parameter
