"""The state a run of operators reads besides its inputs, kept per thread (``contextvars``).

A server runs one prepared model in several threads at once, and one thread may compile a
graph-mode model (seconds to minutes) while others run. What a run switches on for itself
must therefore stay with that run, not leak into every thread of the process:

- :data:`TRAINING`: ``sonnx.autograd.training``, SINGA's flag (batch statistics, Dropout,
  gradients recorded). Per thread as torch's own grad mode is: a thread that trains does not
  make another thread's inference drop values.
- :data:`VALUE_CHECKS`: off while a graph is traced for graph mode (traced values are
  placeholders, see :func:`sonnx.engine.tracing.tracing`). Process-wide, a trace in one
  thread let a bad input in another through as torch's raw ``IndexError`` instead of
  :class:`~sonnx.errors.BadInputError` naming the node, and switched off the fused conv path.
- :data:`DEFERRED_CHECKS`: the device value checks one graph run collects and reads back at
  its end (:func:`sonnx.engine.tracing.deferred_checks`); another thread's run has its own.
- :data:`CPU_AS_DEVICE`: checks of values on the CPU are deferred as a GPU's are, while a test
  counts host reads with the CPU standing in for a GPU (:mod:`sonnx.testing.host_reads`).
- :data:`HOST_ORIGINALS`: for the operator call in progress, the host originals of inputs
  copied to the device (:mod:`sonnx.engine.host_values`).
- :data:`CACHES_IN_PLACE`: a decode loop owns the past KV buffers it feeds and lets
  GroupQueryAttention write the new keys and values into them (onnxruntime-genai's
  ``past_present_share_buffer``) instead of copying each into a new present; off, a run never
  changes its inputs (see :mod:`sonnx.generation.decoder`). Graph mode compiles a graph for
  each setting.
- :data:`RUN_DEVICE`: the graph's device while its run creates tensors that have no input
  to take a device from (:func:`sonnx.device.default_device_for_run`); the default device a
  user sets with ``set_default_device`` stays process-wide.

Each is a :class:`contextvars.ContextVar`, so "per thread" means per context: a new thread
starts from the defaults (training off, value checks on, nothing deferred), whatever the
thread that started it had set; an asyncio task, and a function run by
``asyncio.to_thread`` or ``contextvars.copy_context().run``, start from a copy of the
context they were created in, and what they set stays theirs. ``loop.run_in_executor``
copies nothing: its worker threads start from the defaults.

Deliberately process-wide: the numbering of operator calls (``operator.next_call_number``,
one order for export across threads; ``itertools.count`` hands each number out once), the
caches of a prepared model (shared by its threads, each safe to read while another thread
replaces an entry), and the user's default device.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from sonnx.device import Device

__all__ = [
    "CACHES_IN_PLACE",
    "CPU_AS_DEVICE",
    "DEFERRED_CHECKS",
    "HOST_ORIGINALS",
    "RUN_DEVICE",
    "TRAINING",
    "VALUE_CHECKS",
]

TRAINING: ContextVar[bool] = ContextVar("sonnx.training", default=False)
VALUE_CHECKS: ContextVar[bool] = ContextVar("sonnx.value_checks", default=True)
#: (failed flag, message) pairs of the graph run in progress; None outside one.
DEFERRED_CHECKS: ContextVar[list[tuple[torch.Tensor, Callable[[], str]]] | None] = ContextVar(
    "sonnx.deferred_checks", default=None
)
CPU_AS_DEVICE: ContextVar[bool] = ContextVar("sonnx.cpu_as_device", default=False)
#: id(device copy) -> host original; None when no input was moved. Replaced, never changed
#: in place, so a context copied from this one never sees its entries change.
HOST_ORIGINALS: ContextVar[dict[int, Any] | None] = ContextVar("sonnx.host_originals", default=None)
RUN_DEVICE: ContextVar[Device | None] = ContextVar("sonnx.run_device", default=None)
CACHES_IN_PLACE: ContextVar[bool] = ContextVar("sonnx.caches_in_place", default=False)
