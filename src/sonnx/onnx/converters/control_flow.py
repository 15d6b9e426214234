"""Control flow: If, Loop and Scan run their subgraphs eagerly.

Their graph attributes arrive as bound subgraphs (see ``sonnx.runtime.program``). The
operators a branch or body runs are recorded as usual, so gradients flow through the taken
branch and every loop iteration; an export of such a run is the unrolled computation.
"""

from __future__ import annotations

from typing import Any

import torch

from sonnx.device import as_device
from sonnx.errors import BadInputError
from sonnx.onnx.registry import NodeInfo, converter
from sonnx.onnx.subgraphs import BoundSubgraph
from sonnx.operators.indexing.gather_scatter import gather
from sonnx.operators.shape.layout import identity, unsqueeze
from sonnx.operators.shape.slicing import concat
from sonnx.tensor import Tensor


def _host_bool(t: Tensor | None, default: bool, what: str) -> bool:
    if t is None:
        return default
    if t.size() != 1:
        raise BadInputError(f"{what} must hold one value, received shape {t.shape}")
    return bool(t.data.reshape(-1)[0].item())


def _scalar(value: int | bool, dtype: torch.dtype, like: Tensor | None) -> Tensor:
    """A 0-d constant on ``like``'s device, or (no tensor input) on the default device, which a
    graph being executed makes the graph's device."""
    device = as_device(None if like is None else like.device).torch_device
    return Tensor(data=torch.tensor(value, dtype=dtype, device=device), requires_grad=False)


@converter("If", 1, 11, 13, 16, 19, 21, 23, 24, 25)
def If(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> list[Tensor]:
    taken: BoundSubgraph = attrs[
        "then_branch" if _host_bool(inputs[0], False, f"If {node.name!r}: cond") else "else_branch"
    ]
    # Identity gives each output its own node, so a branch output that is an outer tensor
    # is not renamed in the enclosing scope.
    return [_own(t) for t in taken.run([])]


def _own(value: Any) -> Any:
    """A fresh tensor for a subgraph result (Identity), so naming it in the outer scope never
    renames a tensor of the subgraph's scope; sequences and optionals pass through."""
    return identity(value) if isinstance(value, Tensor) else value


def _stack(items: list[Tensor], axis: int) -> Tensor:
    return concat([unsqueeze(t, axis) for t in items], axis)


@converter("Loop", 1, 11, 13, 16, 19, 21, 23, 24, 25)
def Loop(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> list[Tensor]:
    body: BoundSubgraph = attrs["body"]
    trip_count = inputs[0] if inputs else None
    max_trips = None if trip_count is None else int(trip_count.data.reshape(-1)[0].item())
    keep_going = _host_bool(
        inputs[1] if len(inputs) > 1 else None, True, f"Loop {node.name!r}: cond"
    )
    carried = list(inputs[2:])
    num_scan = body.num_outputs - 1 - len(carried)
    scans: list[list[Tensor]] = [[] for _ in range(num_scan)]
    reference = next((t for t in inputs if isinstance(t, Tensor)), None)
    i = 0
    while keep_going and (max_trips is None or i < max_trips):
        outs = body.run(
            [
                _scalar(i, torch.int64, reference),
                _scalar(keep_going, torch.bool, reference),
                *carried,
            ]
        )
        keep_going = _host_bool(outs[0], True, f"Loop {node.name!r}: body cond output")
        carried = outs[1 : 1 + len(carried)]
        for k, t in enumerate(outs[1 + len(carried) :]):
            scans[k].append(t)
        i += 1
    stacked = []
    for k, items in enumerate(scans):
        if not items:
            raise BadInputError(
                f"Loop {node.name!r}: scan output {k} is empty because the loop ran zero times; "
                "its element shape is unknown"
            )
        stacked.append(_stack(items, 0))
    return [_own(t) for t in carried] + stacked


@converter("Scan", 9, 11, 16, 19, 21, 23, 24, 25)
def Scan(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> list[Tensor]:
    body: BoundSubgraph = attrs["body"]
    num_scan_in = attrs["num_scan_inputs"]
    states = list(inputs[: len(inputs) - num_scan_in])
    scan_inputs = list(inputs[len(inputs) - num_scan_in :])
    in_axes = attrs.get("scan_input_axes") or [0] * num_scan_in
    in_dirs = attrs.get("scan_input_directions") or [0] * num_scan_in
    num_scan_out = body.num_outputs - len(states)
    out_axes = attrs.get("scan_output_axes") or [0] * num_scan_out
    out_dirs = attrs.get("scan_output_directions") or [0] * num_scan_out
    lengths = {t.shape[a % t.ndim()] for t, a in zip(scan_inputs, in_axes, strict=True)}
    if len(lengths) != 1:
        raise BadInputError(f"Scan {node.name!r}: scan inputs disagree on length: {lengths}")
    steps = lengths.pop()
    collected: list[list[Tensor]] = [[] for _ in range(num_scan_out)]
    for s in range(steps):
        slices = [
            gather(t, a % t.ndim(), _scalar(steps - 1 - s if d else s, torch.int64, t))
            for t, a, d in zip(scan_inputs, in_axes, in_dirs, strict=True)
        ]
        outs = body.run([*states, *slices])
        states = outs[: len(states)]
        for k, t in enumerate(outs[len(states) :]):
            collected[k].append(t)
    results = [_own(t) for t in states]
    for items, axis, direction in zip(collected, out_axes, out_dirs, strict=True):
        ordered = items[::-1] if direction else items
        results.append(_stack(ordered, axis % (ordered[0].ndim() + 1)))
    return results


@converter("Scan", 8)
def Scan_8(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> list[Tensor]:
    """Scan-8: every input has a leading batch axis; the sequence axis is 1.

    Each batch row is scanned like Scan-9 and the results are stacked back along axis 0.
    """
    lengths, rest = inputs[0], list(inputs[1:])
    num_scan_in = attrs["num_scan_inputs"]
    directions = attrs.get("directions") or [0] * num_scan_in
    batch = rest[0].shape[0]
    if lengths is not None and len(set(lengths.data.tolist())) > 1:
        raise BadInputError(f"Scan {node.name!r}: unequal sequence_lens are not supported")
    rows = []
    for b in range(batch):
        index = _scalar(b, torch.int64, rest[0])
        row_inputs = [gather(t, 0, index) for t in rest]
        rows.append(
            Scan(
                node,
                row_inputs,
                {
                    "body": attrs["body"],
                    "num_scan_inputs": num_scan_in,
                    "scan_input_directions": directions,
                },
            )
        )
    return [_stack([row[k] for row in rows], 0) for k in range(len(rows[0]))]
