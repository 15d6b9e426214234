"""Scan: runs its body once per slice of its scan inputs, carrying state across the steps."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from sonnx.errors import BadInputError
from sonnx.operators.control.common import GraphValueOperator, own, scalar, stack
from sonnx.operators.indexing.gather_scatter import gather
from sonnx.tensor import Tensor

__all__ = ["Scan"]


class Scan(GraphValueOperator):
    """The body takes ``(*states, *slices)`` and returns ``(*states, *scan_outputs)``; scan
    inputs are sliced along their ``scan_input_axes`` (backwards where
    ``scan_input_directions`` says 1), scan outputs stacked along ``scan_output_axes``.

    Scan-8 differs: every input has a leading batch axis (the sequence axis is 1) and a first
    ``sequence_lens`` input; each batch row is scanned as Scan-9 does and the results are
    stacked back along axis 0.
    """

    op_type = "Scan"
    since_versions: ClassVar[tuple[int, ...]] = (8, 9, 11, 16, 19, 21, 23, 24, 25)

    def run(self, inputs: list[Any]) -> list[Any]:
        """The final states, then the stacked scan outputs.

        :param inputs: ``[*initial_states, *scan_inputs]`` (Scan-8: ``sequence_lens`` first).
        :returns: the states after the last step, then the scan outputs.
        """
        if self.version == 8:
            return self._batched(inputs)
        return self._scan(inputs, self.attrs)

    def _scan(self, inputs: list[Any], attrs: dict[str, Any]) -> list[Any]:
        body = self.subgraph("body")
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
            raise BadInputError(f"{self.where()}: scan inputs disagree on length: {lengths}")
        steps = lengths.pop()
        collected: list[list[Tensor]] = [[] for _ in range(num_scan_out)]
        for s in range(steps):
            slices = [
                gather(t, a % t.ndim(), scalar(steps - 1 - s if d else s, torch.int64, t))
                for t, a, d in zip(scan_inputs, in_axes, in_dirs, strict=True)
            ]
            outs = body.run([*states, *slices])
            states = outs[: len(states)]
            for k, t in enumerate(outs[len(states) :]):
                collected[k].append(t)
        results = [own(t) for t in states]
        for items, axis, direction in zip(collected, out_axes, out_dirs, strict=True):
            ordered = items[::-1] if direction else items
            results.append(stack(ordered, axis % (ordered[0].ndim() + 1)))
        return results

    def _batched(self, inputs: list[Any]) -> list[Any]:
        """Scan-8: each batch row scanned as Scan-9, the results stacked along axis 0."""
        lengths, rest = inputs[0], list(inputs[1:])
        num_scan_in = self.attrs["num_scan_inputs"]
        row_attrs = {
            "num_scan_inputs": num_scan_in,
            "scan_input_directions": self.attrs.get("directions") or [0] * num_scan_in,
        }
        batch = rest[0].shape[0]
        if lengths is not None and len(set(lengths.data.tolist())) > 1:
            raise BadInputError(f"{self.where()}: unequal sequence_lens are not supported")
        rows = []
        for b in range(batch):
            index = scalar(b, torch.int64, rest[0])
            rows.append(self._scan([gather(t, 0, index) for t in rest], row_attrs))
        return [stack([row[k] for row in rows], 0) for k in range(len(rows[0]))]
