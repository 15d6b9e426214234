"""Running operators under a graph tracer (``make_fx``), for graph mode.

Two things change while a graph is traced. Operators skip the checks that read tensor values
on the host (an index out of range), since traced values are placeholders: :func:`tracing`.
And :class:`ValueFlow` follows which tensors carry traced values (model inputs, weights):
an operation that touches none of them depends only on shapes and constants, which the traced
graph is specialised on, so it runs untraced and its result becomes a constant of the graph
(shape arithmetic, ``Shape -> Gather -> Concat -> Reshape``, is folded away this way); an
operation that would let traced values steer Python (a host read) or decide an output shape
(NonZero, Unique) raises :class:`NotTraceableError`, and the caller runs eagerly instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch._prims_common import is_contiguous_or_false
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from sonnx.errors import BadInputError
from sonnx.run_state import CPU_AS_DEVICE, DEFERRED_CHECKS, VALUE_CHECKS
from sonnx.symbolic_sizes import SYMBOLIC_TYPES

__all__ = [
    "NotTraceableError",
    "ValueFlow",
    "defer_check",
    "deferred_checks",
    "defers_checks_on",
    "tracing",
    "value_checks",
]


#: ``value_checks() -> bool``: whether operators may read tensor values on the host to reject
#: bad ones (an index out of range). False while :func:`tracing` is on in this thread: the
#: traced values are placeholders. The context variable's own ``get``: operators ask once per
#: node, and a Python function around it would cost more than the read.
value_checks = VALUE_CHECKS.get


@contextmanager
def tracing() -> Iterator[None]:
    """Run operators for a graph tracer (``make_fx``): value checks off in this thread (see
    :mod:`sonnx.run_state`), restored after."""
    token = VALUE_CHECKS.set(False)
    try:
        yield
    finally:
        VALUE_CHECKS.reset(token)


def defers_checks_on(device: torch.device) -> bool:
    """Whether a check of values on ``device`` is deferred: inside a graph run, off the CPU
    (reading a GPU value waits for the GPU, so a run reads all its checks back at once), or on
    the CPU while it stands in for a GPU (:data:`sonnx.run_state.CPU_AS_DEVICE`)."""
    return DEFERRED_CHECKS.get() is not None and (device.type != "cpu" or CPU_AS_DEVICE.get())


def defer_check(failed: torch.Tensor, message: Callable[[], str]) -> None:
    """Record a 0-d boolean ``failed`` to read at the end of the run; ``message()`` names the
    problem if it is True."""
    deferred = DEFERRED_CHECKS.get()
    if deferred is None:
        raise RuntimeError("defer_check outside deferred_checks()")
    deferred.append((failed, message))


@contextmanager
def deferred_checks() -> Iterator[None]:
    """Collect the deferred checks of a graph run and read them back once, at its end (an
    enclosing run in this thread, if any, does it for nested subgraph runs). A failed check
    raises :class:`BadInputError` with its message. Values on torch's ``meta`` device have no
    contents to read, so their checks are dropped."""
    if DEFERRED_CHECKS.get() is not None:
        yield
        return
    deferred: list[tuple[torch.Tensor, Callable[[], str]]] = []
    token = DEFERRED_CHECKS.set(deferred)
    try:
        yield
        pending = [(flag, message) for flag, message in deferred if flag.device.type != "meta"]
    finally:
        DEFERRED_CHECKS.reset(token)
    if pending and bool(torch.stack([flag.to(pending[0][0].device) for flag, _ in pending]).any()):
        for flag, message in pending:
            if bool(flag):
                raise BadInputError(message())


#: torch functions whose output *shape* depends on input values (on a GPU they wait to learn
#: it, reading the device back).
DATA_DEPENDENT_SHAPES = frozenset(
    {
        torch.nonzero,
        torch.Tensor.nonzero,
        torch.argwhere,
        torch.Tensor.argwhere,
        torch.masked_select,
        torch.Tensor.masked_select,
        torch.unique,
        torch.Tensor.unique,
        torch.unique_consecutive,
        torch.Tensor.unique_consecutive,
        torch.repeat_interleave,
        torch.Tensor.repeat_interleave,
        torch.bincount,
        torch.Tensor.bincount,
    }
)
# torch functions that draw random numbers: always traced, so each run draws afresh (run
# untraced, a draw would become a constant of the graph).
_RANDOM = frozenset(
    {
        torch.rand,
        torch.randn,
        torch.randint,
        torch.randperm,
        torch.rand_like,
        torch.randn_like,
        torch.randint_like,
        torch.bernoulli,
        torch.Tensor.bernoulli,
        torch.normal,
        torch.poisson,
        torch.multinomial,
        torch.Tensor.multinomial,
        torch.Tensor.uniform_,
        torch.Tensor.normal_,
        torch.Tensor.bernoulli_,
        torch.Tensor.random_,
        torch.Tensor.exponential_,
        torch.Tensor.geometric_,
        torch.Tensor.log_normal_,
        torch.Tensor.cauchy_,
        torch.nn.functional.dropout,
    }
)
# Ways to read values on the host that do not pass through a traced torch operation.
_HOST_READS = frozenset(
    {torch.Tensor.numpy, torch.Tensor.__array__, torch.Tensor.tolist, torch.Tensor.item}
)


# torch functions that view their first input when its strides allow, else copy it.
_VIEW_IF_POSSIBLE = frozenset(
    {
        torch.reshape,
        torch.Tensor.reshape,
        torch.flatten,
        torch.Tensor.flatten,
        torch.matmul,
        torch.Tensor.matmul,
        torch.Tensor.__matmul__,
        torch.nn.functional.linear,
    }
)


def _layout_free(value: Any) -> Any:
    """``value``, copied into row-major order unless it surely is already.

    Whether a transposed tensor can be viewed with another shape depends on its sizes: with a
    batch of one it can, with more it cannot, so a symbolic trace that asks gets a guard that
    holds its graph to batches of one (or to the rest). A copy to row-major order has no such
    question; inductor drops it where the layout turns out to allow a view anyway.
    """
    if (
        isinstance(value, torch.Tensor)
        and any(isinstance(d, torch.SymInt) for d in value.shape)
        and not is_contiguous_or_false(value)
    ):
        return value.clone(memory_format=torch.contiguous_format)
    return value


class NotTraceableError(Exception):
    """The run depends on tensor values in a way one static graph cannot hold.

    ``step_index`` is set by the imported graph's program to the step that raised it, so
    graph mode can run that step eagerly and compile the rest.
    """

    step_index: int | None = None


class ValueFlow(TorchFunctionMode):
    """Tracks the tensors computed from traced values (inputs, weights) during a trace.

    A call that touches none of them computes something fixed for this input signature (shape
    arithmetic, constants): it runs untraced and its result is baked into the graph. A call on
    traced values, or one that draws random numbers, is recorded, and its results are traced
    values in turn.
    """

    def __init__(self, traced: Sequence[torch.Tensor]) -> None:
        super().__init__()
        # id -> tensor; holding the tensors keeps their ids unique for the trace's duration.
        self._traced: dict[int, torch.Tensor] = {id(t): t for t in traced}

    def _is_traced(self, value: Any) -> bool:
        """A traced tensor, or a symbolic size (a trace with symbolic sizes): computing with
        either must be recorded, not folded to today's value."""
        if isinstance(value, SYMBOLIC_TYPES):
            return True
        return isinstance(value, torch.Tensor) and id(value) in self._traced

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat = pytree.tree_leaves((args, kwargs))
        if func not in _RANDOM and not any(self._is_traced(v) for v in flat):
            # On real tensors even in a symbolic trace: a symbolic size read here becomes its
            # value, and the trace's guards then hold the graph to that size.
            with disable_proxy_modes_tracing(), unset_fake_temporarily():
                return func(*args, **kwargs)
        if func in _HOST_READS:
            raise NotTraceableError(f"it reads a computed tensor on the host ({func.__name__})")
        if func in DATA_DEPENDENT_SHAPES or (
            func is torch.Tensor.__getitem__
            and any(
                isinstance(v, torch.Tensor) and self._is_traced(v) and v.dtype == torch.bool
                for v in flat[1:]
            )
        ):
            raise NotTraceableError(f"an output shape depends on tensor values ({func.__name__})")
        if func in _VIEW_IF_POSSIBLE and args:
            args = (_layout_free(args[0]), *args[1:])
        out = func(*args, **kwargs)
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._traced[id(t)] = t
        return out
