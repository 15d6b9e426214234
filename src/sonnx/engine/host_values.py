"""Shape values live on the host, so shape arithmetic never waits for a device.

In an exported graph, ``Shape -> Gather -> Concat -> Reshape`` chains compute shapes from
shapes. ``Shape`` and ``Size`` therefore create their outputs on the CPU, and an imported
graph keeps its small integer constants there (:func:`constant_device`): the whole chain runs
on the host, and the operator that finally reads the values (a Reshape's target) reads host
memory instead of copying from a GPU and waiting for it.

Where such a host value meets a tensor on a device (position ids from ``Range`` indexing an
embedding on the GPU), :func:`place_inputs` copies it over for the operator's math, without
waiting; :func:`host` still hands operators that read values on the host the original.
On the CPU nothing moves and nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from sonnx.errors import BadInputError
from sonnx.run_state import HOST_ORIGINALS

#: Integer constants of an imported graph with at most this many elements stay on the host.
HOST_CONSTANT_SIZE = 64


def _integral(t: torch.Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex())


def is_host_value(t: torch.Tensor) -> bool:
    """An integer or boolean tensor on the CPU: a shape, an index, a mask made from shapes."""
    return t.device.type == "cpu" and _integral(t)


def constant_device(t: torch.Tensor, graph_device: torch.device) -> torch.device:
    """Where an imported graph keeps constant ``t``: small integer constants on the host."""
    if _integral(t) and t.numel() <= HOST_CONSTANT_SIZE:
        return torch.device("cpu")
    return graph_device


def place_inputs(op_type: str, inputs: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
    """The inputs on one device: host values (and small float tensors computed on the host from
    sizes) joining device tensors are copied over.

    Returns ``inputs`` itself when they already share a device, else a new list. Any other mix
    (float data on the CPU with data on a GPU, two GPUs) is the caller's error.
    """
    first: torch.device | None = None
    for t in inputs:  # the common case, one device, without building sets (once per node)
        if t is not None:
            if first is None:
                first = t.device
            elif t.device != first:
                break
    else:
        return inputs
    present = [(i, t) for i, t in enumerate(inputs) if t is not None]
    devices = {t.device for _, t in present}
    targets = {d for d in devices if d.type != "cpu"}
    movable = all(t.device in targets or _movable(t) for _, t in present)
    if len(targets) != 1 or not movable:
        first, first_device = present[0][0], present[0][1].device
        position, other = next((i, t) for i, t in present if t.device != first_device)
        raise BadInputError(
            f"{op_type}: all inputs must be on one device; input {first} is on {first_device}, "
            f"input {position} is on {other.device}"
        )
    (target,) = targets
    placed: list[torch.Tensor | None] = []
    originals = dict(HOST_ORIGINALS.get() or {})  # this thread's table, replaced, not changed
    for t in inputs:
        if t is not None and t.device != target:
            copy = t.to(target, non_blocking=True)
            originals[id(copy)] = t
            t = copy
        placed.append(t)
    HOST_ORIGINALS.set(originals)
    return placed


def _movable(t: torch.Tensor) -> bool:
    """A host value, or a small float tensor on the host: shape arithmetic's floats (a Cast of
    a size, a Range limit computed from one), which meet device tensors as host values do."""
    return t.device.type == "cpu" and (_integral(t) or t.numel() <= HOST_CONSTANT_SIZE)


def forget(placed: Sequence[torch.Tensor | None]) -> None:
    """After the operator call that :func:`place_inputs` served: drop its device copies."""
    originals = HOST_ORIGINALS.get()
    if originals:
        ids = {id(t) for t in placed if t is not None}
        HOST_ORIGINALS.set({k: v for k, v in originals.items() if k not in ids} or None)


def call_placed(
    op_type: str, forward: Callable[..., Any], inputs: list[torch.Tensor | None]
) -> Any:
    """``forward(*inputs)`` with host values copied to the device of the others for the call
    (:func:`place_inputs`) and their copies dropped after it: the one placement of an
    operator's inputs, which a sonnx call, the step loop and a generated plan all go through.

    :param op_type: the operator's type (what :func:`place_inputs` names in its errors).
    :param forward: the operator's ``forward``.
    :param inputs: its input tensors (None for absent optional inputs).
    :returns: what ``forward`` returns.
    """
    placed = place_inputs(op_type, inputs)
    try:
        return forward(*placed)
    finally:
        if placed is not inputs:
            forget(placed)


def host(t: torch.Tensor) -> torch.Tensor:
    """``t``, or the host original of an input copied to the device for this operator call
    (in this thread): what an operator reads when it needs values on the host (``.tolist()``,
    ``.item()``)."""
    originals = HOST_ORIGINALS.get()
    return t if originals is None else originals.get(id(t), t)
