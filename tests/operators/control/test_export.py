"""An export of a run that went through control flow or sequences writes what ran: the taken
branch's operators, a Loop unrolled, a sequence's cuts and joins (the control operators record
no node of their own), and onnxruntime computes the same from it at another batch size."""

from __future__ import annotations

import numpy as np
import onnx

import sonnx.autograd as ag
from sonnx.operators.control import ConcatFromSequence, If, Loop, SplitToSequence
from sonnx.tensor import Tensor
from tests.onnx.export_check import export_check, rng_inputs
from tests.operators.control.helpers import PythonSubgraph

W = np.array([0.5, -1.0, 2.0], dtype=np.float32)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def test_an_exported_if_is_the_branch_that_ran() -> None:
    def build(x: Tensor) -> Tensor:
        w = Tensor(data=W, requires_grad=False)
        then = PythonSubgraph(lambda: [ag.mul(x, w)], 0, 1)
        other = PythonSubgraph(lambda: [ag.sub(x, w)], 0, 1)
        (y,) = If(then_branch=then, else_branch=other)(Tensor(data=np.array(True)))
        return y

    model = export_check(build, rng_inputs(((3,), np.float32)))
    assert "Mul" in _ops(model) and not {"If", "Sub"} & set(_ops(model))


def test_an_exported_loop_is_unrolled() -> None:
    def build(x: Tensor) -> Tensor:
        body = PythonSubgraph(lambda i, cond, v: [cond, ag.add(v, x)], 3, 2)
        (v,) = Loop(body=body)(Tensor(data=np.array(3)), None, x)
        return v

    model = export_check(build, rng_inputs(((3,), np.float32)))
    assert _ops(model).count("Add") == 3 and "Loop" not in _ops(model)


def test_an_exported_sequence_round_trip_is_its_split_and_concat() -> None:
    def build(x: Tensor) -> Tensor:
        return ConcatFromSequence(axis=1, new_axis=1)(SplitToSequence(axis=1, keepdims=0)(x))

    model = export_check(build, rng_inputs(((4, 3), np.float32)))
    assert "Concat" in _ops(model) and not any("Sequence" in op for op in _ops(model))
