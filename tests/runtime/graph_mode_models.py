"""Small models the graph-mode tests share, most built by ``one_input_model`` (x [n, 3] ->
y): a chain of elementwise steps with a Tanh in the middle (where a test double of the
compiler plants its faults), two compiled segments around an eager NonZero, and slices of a
NonZero's data-dependent count; and a store of compiled graphs made once for a module, which
its tests copy instead of compiling the same graph each (every test starts from an empty
store: tests/conftest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import sonnx
from sonnx.runtime.store import ENV_VAR, store_root


def compile_into_store(root: Path, model: onnx.ModelProto, *runs: list[np.ndarray]) -> int:
    """Compile ``model``'s graphs for the inputs of ``runs`` (one run each) into a store at
    ``root``; how many graphs were compiled."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ENV_VAR, str(root))
        rep = sonnx.prepare(model, use_graph=True)
        for feeds in runs:
            rep.run(feeds)
    return rep.graph_runner.compile_count


def copy_store(stored: Path) -> None:
    """This test's store (empty) becomes a copy of ``stored``: its graphs load instead of
    compiling."""
    root = store_root()
    if root is None:
        raise RuntimeError(f"the test has no graph store (${ENV_VAR} is off)")
    shutil.copytree(stored, root, dirs_exist_ok=True)


def one_input_model(
    nodes: list[onnx.NodeProto], name: str, initializers: list[onnx.TensorProto] | None = None
) -> onnx.ModelProto:
    """An opset-17 model of ``nodes`` reading ``x`` (float, ``[n, 3]``) and giving ``y``."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializers or [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def compute_around_a_nonzero() -> onnx.ModelProto:
    """Relu -> Mul (compiled) -> NonZero (eager) -> Cast -> ReduceSum -> Mul by the first
    segment's output (compiled again)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "r"], ["sq"], name="square"),
        helper.make_node("NonZero", ["sq"], ["where"], name="nonzero"),
        helper.make_node("Cast", ["where"], ["wf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["wf"], ["total"], name="total", keepdims=0),
        helper.make_node("Mul", ["sq", "total"], ["y"], name="scaled"),
    ]
    return one_input_model(nodes, "around")


def chain_with_a_tanh() -> onnx.ModelProto:
    """Relu -> Mul by 2 -> Add x -> Tanh -> Mul -> Sigmoid: six elementwise steps."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Mul", ["a", "two"], ["b"], name="double"),
        helper.make_node("Add", ["b", "x"], ["c"], name="skip"),
        helper.make_node("Tanh", ["c"], ["d"], name="tanh"),
        helper.make_node("Mul", ["d", "c"], ["e"], name="gate"),
        helper.make_node("Sigmoid", ["e"], ["y"], name="squash"),
    ]
    return one_input_model(nodes, "chain", [two])


def slices_of_a_nonzero_count() -> onnx.ModelProto:
    """NonZero (eager) of ``x`` -> Cast, then slices whose sizes follow its count: the
    positions but the last, walked backwards from INT64_MIN's clamp (``backward``), every
    second from the second to INT64_MAX (``forward``), and ``x``'s first count entries, the
    end read from the NonZero's shape (``first``)."""
    int64 = np.iinfo(np.int64)

    def ints(name: str, *values: int) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.INT64, [len(values)], list(values))

    nodes = [
        helper.make_node("NonZero", ["x"], ["where"], name="nonzero"),
        helper.make_node("Cast", ["where"], ["positions"], name="cast", to=TensorProto.FLOAT),
        helper.make_node(
            "Slice",
            ["positions", "minus_two", "lowest", "one", "minus_one"],
            ["back"],
            name="back",
        ),
        helper.make_node("Relu", ["back"], ["backward"], name="relu"),
        helper.make_node(
            "Slice", ["positions", "one", "highest", "one", "two"], ["forward"], name="every_2nd"
        ),
        helper.make_node("Shape", ["where"], ["where_shape"], name="shape"),
        helper.make_node("Slice", ["where_shape", "one", "two"], ["count"], name="count"),
        helper.make_node("Slice", ["x", "zero", "count"], ["head"], name="head"),
        helper.make_node("Neg", ["head"], ["first"], name="negate"),
    ]
    graph = helper.make_graph(
        nodes,
        "slices_of_a_count",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [
            helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
            for name in ("backward", "forward", "first")
        ],
        [
            ints("zero", 0),
            ints("one", 1),
            ints("two", 2),
            ints("minus_one", -1),
            ints("minus_two", -2),
            ints("lowest", int(int64.min)),
            ints("highest", int(int64.max)),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
