"""What graph mode chooses a compiled graph by.

A segment's graphs are found in two steps. Its inputs' *signature* (layouts, and whether this
run writes caches in place) picks the choices made before for such inputs, with which inputs
are baked in; the baked inputs' values then pick the graph. A compiled graph itself is kept
under its :func:`compiled_key`: what it is specialised on whatever its guards say (rank,
dtype, device), the baked values, and the in-place switch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from sonnx.engine.host_values import HOST_CONSTANT_SIZE, is_host_value
from sonnx.run_state import CACHES_IN_PLACE

if TYPE_CHECKING:
    from sonnx.runtime.program import GraphProgram

__all__ = [
    "RECENT_SIGNATURES",
    "bake_tests",
    "baked_values",
    "compiled_key",
    "is_control_value",
    "is_shape_value",
    "layout",
    "signature",
]


def _kind(t: torch.Tensor) -> tuple[Any, ...]:
    """What a compiled graph is specialised on whatever its guards say: rank, dtype, device."""
    return (t.dim(), t.dtype, t.device)


#: How many input signatures a segment remembers its graph for (a server fed every sequence
#: length would otherwise grow the memo without bound); past it, the memo starts afresh.
RECENT_SIGNATURES = 64


def signature(datas: list[torch.Tensor]) -> tuple[Any, ...]:
    """The key of a segment's choices: its inputs' layouts, and whether this run lets caches
    be written in place (:data:`~sonnx.run_state.CACHES_IN_PLACE`), which a graph traced
    with it does to its inputs and one traced without it never does."""
    return (CACHES_IN_PLACE.get(), *map(layout, datas))


def layout(t: torch.Tensor) -> tuple[Any, ...]:
    """All a traced input's graph depends on: dtype, device, sizes, strides and offset (all its
    guards can read). Whether an input is baked in follows from its layout too (see
    :func:`bake_tests`); a baked input's graph depends
    on its values as well."""
    return (t.dtype, t.device, t.shape, t.stride(), t.storage_offset())


def _values(t: torch.Tensor) -> tuple[Any, ...]:
    """A baked value's elements, flat (``tolist`` is cheap, ``reshape`` a dispatched op)."""
    if t.dim() == 0:
        return (t.item(),)
    return tuple(t.tolist() if t.dim() == 1 else t.reshape(-1).tolist())


def baked_values(datas: list[torch.Tensor], positions: tuple[int, ...]) -> tuple[Any, ...]:
    """The values of the inputs at ``positions`` (the baked ones), as a graph's key."""
    return tuple(_values(datas[i]) for i in positions)


def is_shape_value(t: torch.Tensor) -> bool:
    """A small integer tensor on the host: a shape value, baked into a segment's graph."""
    return is_host_value(t) and t.numel() <= HOST_CONSTANT_SIZE


def is_control_value(t: torch.Tensor) -> bool:
    """One integer or boolean on the host: a switch (a sample rate, a mode flag) that can
    select an ``If`` branch, baked into a segment's graph. On a GPU, one integer or boolean on
    the device too: choosing the graph then reads the one value back, as the ``If`` run eagerly
    would, and the rest compiles as one graph (an H100 ran the voice-activity stand-in's ``If``
    eagerly while only host values were baked). A CPU tensor that is not a host value (a
    computed one-element index) is not baked: it would cost a compile per value."""
    if t.numel() != 1:
        return False
    if is_host_value(t):
        return True
    return t.device.type != "cpu" and not (t.is_floating_point() or t.is_complex())


def compiled_key(datas: list[torch.Tensor], baked: list[bool]) -> tuple[Any, ...]:
    """The key a segment's compiled graphs are kept under for inputs ``datas``, those marked
    in ``baked`` baked in with their values."""
    return (
        CACHES_IN_PLACE.get(),
        *(
            (_kind(t), _values(t)) if bake else _kind(t)
            for t, bake in zip(datas, baked, strict=True)
        ),
    )


def bake_tests(program: GraphProgram) -> Callable[[str], Callable[[torch.Tensor], bool] | None]:
    """For a segment input's name, how to tell whether its value is baked in: a shape value's
    (:mod:`sonnx.runtime.shape_values`), if small integers on the host; that of a graph input
    some ``If``'s condition is computed from, if one value (a switch); None: never baked."""
    steps = program.steps
    shape_values = {o for i in program.shape_value_steps for o in steps[i].outputs if o}
    switches = _switch_inputs(program)

    def test(name: str) -> Callable[[torch.Tensor], bool] | None:
        if name in shape_values:
            return is_shape_value
        return is_control_value if name in switches else None

    return test


def _switch_inputs(program: GraphProgram) -> set[str]:
    """The graph inputs some ``If``'s condition is computed from."""
    inputs = set(program.input_names)
    pending = [s.inputs[0] for s in program.steps if s.info.op_type == "If" and s.inputs]
    found: set[str] = set()
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in inputs:
            found.add(name)
        producer = program.step_producing(name)
        if producer is not None:
            pending.extend(producer.reads())
    return found
