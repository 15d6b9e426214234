"""Counting reads of device values back to the host: a test hook.

On a GPU, every read of a device value on the host (``.item()``, ``bool(t)``, ``.tolist()``,
``.numpy()``, a copy to the CPU, an operation whose output shape depends on values, such as
``nonzero``) waits for the device to finish the work queued before it. sonnx keeps shape
values on the host (:mod:`sonnx.engine.host_values`) and reads its deferred value checks
back once at the end of a run (:func:`sonnx.engine.tracing.deferred_checks`), so a run should
read the device at most once. :func:`count_host_reads` counts the reads to prove it::

    with count_host_reads(device_values(rep, feeds)) as reads:
        rep.run(feeds)
    assert reads.count <= 1, reads.functions

It installs a torch function mode for its block, in the calling thread only (torch keeps its
mode stack per thread); outside the block nothing is installed, so a run that is not counted
pays nothing. A read counts when the tensor read is on a device other than the CPU, or was
computed from one of the ``device_values`` handed in: on the CPU standing in for a GPU
(``SONNX_CUDA_TESTS_ON=cpu``) that is how it knows which reads would cross from a device,
since there every value is on the host. What is computed only from sizes (``Shape``, small
integer constants) is not a device value and may be read freely.

Only reads made through Python-visible torch calls are seen; a C++ kernel that synchronises
on its own is not. A copy to the CPU (``.cpu()``, ``.to("cpu")``) counts only from a real
device: on the CPU standing in for one it moves nothing, and what reads the copy counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from sonnx.engine.host_values import constant_device
from sonnx.engine.tracing import DATA_DEPENDENT_SHAPES
from sonnx.run_state import CPU_AS_DEVICE
from sonnx.tensor import Tensor

__all__ = ["HostReads", "count_host_reads", "device_values"]

#: Calls that read their first tensor's values on the host.
_READS = frozenset(
    {
        torch.Tensor.item,
        torch.Tensor.tolist,
        torch.Tensor.numpy,
        torch.Tensor.__array__,
        torch.Tensor.__bool__,
        torch.Tensor.__int__,
        torch.Tensor.__float__,
        torch.Tensor.__index__,
        torch.equal,
        torch.Tensor.equal,
        torch.allclose,
        torch.Tensor.allclose,
    }
)
_CPU = torch.device("cpu")


class HostReads(TorchFunctionMode):
    """The reads of device values seen while installed: :attr:`functions` names each read's
    torch function, in order. Use through :func:`count_host_reads`."""

    def __init__(self, device_values: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        # id -> tensor: holding the tensors keeps their ids unique while counting.
        self._device: dict[int, torch.Tensor] = {id(t): t for t in device_values}
        #: Whether any device values were handed in (the CPU standing in for a GPU).
        self.tracked = bool(self._device)
        self.functions: list[str] = []

    @property
    def count(self) -> int:
        """How many reads of device values were seen."""
        return len(self.functions)

    def _on_device(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and (
            value.device.type not in ("cpu", "meta") or id(value) in self._device
        )

    def _reads(self, func: Any, args: tuple, kwargs: dict) -> bool:
        if not args or not self._on_device(args[0]):
            return False
        if func in _READS or func in DATA_DEPENDENT_SHAPES:
            return True
        if func is torch.Tensor.__getitem__:  # boolean-mask indexing: a value-shaped output
            keys = args[1] if isinstance(args[1], tuple) else (args[1],)
            return any(isinstance(k, torch.Tensor) and k.dtype == torch.bool for k in keys)
        # A copy to the host counts from a real device only: on the CPU standing in for one,
        # it moves nothing, and the read that follows it counts instead.
        if func is torch.Tensor.cpu:
            return args[0].device.type != "cpu"
        if func is torch.Tensor.to and args[0].device.type != "cpu":
            device = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
            return device is not None and device.type == "cpu"
        return False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._reads(func, args, kwargs):
            self.functions.append(getattr(func, "__name__", str(func)))
        out = func(*args, **kwargs)
        if any(self._on_device(v) for v in pytree.tree_leaves((args, kwargs))):
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.device.type in ("cpu", "meta"):
                    self._device[id(t)] = t  # computed from a device value: one too
        return out


@contextmanager
def count_host_reads(device_values: Iterable[torch.Tensor] = ()) -> Iterator[HostReads]:
    """Count, in this thread, the reads of device values inside the ``with`` block (see the
    module's docstring).

    ``device_values`` are the tensors that stand for device memory when the run is on the CPU
    (:func:`device_values` collects a prepared model's). Given any, the CPU stands in for a
    GPU in this block in one more way: value checks on it are deferred to the end of the run
    as a GPU's are (:data:`sonnx.run_state.CPU_AS_DEVICE`), so the reads counted are those a
    GPU run makes."""
    reads = HostReads(device_values)
    token = CPU_AS_DEVICE.set(bool(reads.tracked))
    try:
        with reads:
            yield reads
    finally:
        CPU_AS_DEVICE.reset(token)


def device_values(rep: Any, feeds: Iterable[Tensor] | Mapping[str, Tensor]) -> list[torch.Tensor]:
    """The tensors of a prepared model (:func:`sonnx.prepare`) and of its feeds that a GPU run
    keeps on the GPU: the feeds, the weights, and every constant except the small integer
    ones that stay on the host (:func:`sonnx.engine.host_values.constant_device`)."""
    fed = feeds.values() if isinstance(feeds, Mapping) else feeds
    gpu = torch.device("cuda")
    kept = [t.data for t in rep.constants.values() if constant_device(t.data, gpu) != _CPU]
    return [t.data for t in fed] + kept
