"""Loop: runs its body while a trip count and a condition allow, carrying values across."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from sonnx.errors import BadInputError
from sonnx.operators.control.common import GraphValueOperator, host_bool, own, scalar, stack
from sonnx.tensor import Tensor

__all__ = ["Loop"]


class Loop(GraphValueOperator):
    """ONNX's general loop. The body takes ``(iteration, cond, *carried)`` and returns
    ``(cond, *carried, *scan_outputs)``; the scan outputs of every iteration are stacked along
    a new first axis. The trip count and the conditions are read on the host, so the loop
    runs in Python and each iteration's operators are recorded."""

    op_type = "Loop"
    since_versions: ClassVar[tuple[int, ...]] = (1, 11, 13, 16, 19, 21, 23, 24, 25)

    def run(self, inputs: list[Any]) -> list[Any]:
        """The final carried values, then the stacked scan outputs.

        :param inputs: ``[M, cond, *v_initial]``: the trip count and the condition (each None
            when absent), then the initial carried values.
        :returns: the carried values after the last iteration, then the scan outputs.
        """
        body = self.subgraph("body")
        trip_count = inputs[0] if inputs else None
        max_trips = None if trip_count is None else int(trip_count.data.reshape(-1)[0].item())
        keep_going = host_bool(
            inputs[1] if len(inputs) > 1 else None, True, f"{self.where()}: cond"
        )
        carried = list(inputs[2:])
        scans: list[list[Tensor]] = [[] for _ in range(body.num_outputs - 1 - len(carried))]
        reference = next((t for t in inputs if isinstance(t, Tensor)), None)
        i = 0
        while keep_going and (max_trips is None or i < max_trips):
            outs = body.run(
                [
                    scalar(i, torch.int64, reference),
                    scalar(keep_going, torch.bool, reference),
                    *carried,
                ]
            )
            keep_going = host_bool(outs[0], True, f"{self.where()}: body cond output")
            carried = outs[1 : 1 + len(carried)]
            for k, t in enumerate(outs[1 + len(carried) :]):
                scans[k].append(t)
            i += 1
        stacked = [self._stacked(k, items) for k, items in enumerate(scans)]
        return [own(t) for t in carried] + stacked

    def _stacked(self, k: int, items: list[Tensor]) -> Tensor:
        if not items:
            raise BadInputError(
                f"{self.where()}: scan output {k} is empty because the loop ran zero times; "
                "its element shape is unknown"
            )
        return stack(items, 0)
