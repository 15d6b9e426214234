"""The program's one index of producers and readers (:mod:`sonnx.runtime.program_index`):
each value's producing step, every read of it (at an input, or by a subgraph body from the
enclosing scope, nested bodies included), the graph's outputs, and the index built again after
a pass rewires the steps."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.runtime.program import GraphProgram
from sonnx.runtime.program_index import ProgramIndex, Use
from sonnx.runtime.subgraphs import Subgraph

FLOAT = TensorProto.FLOAT


def _value(name: str, elem: int = FLOAT, shape: list[int] | None = None):
    return helper.make_tensor_value_info(name, elem, shape)


def _program(
    nodes: list[onnx.NodeProto],
    outputs: list[str],
    inits: dict[str, np.ndarray] | None = None,
    inputs: tuple[str, ...] = ("x",),
) -> GraphProgram:
    graph = helper.make_graph(
        nodes,
        "g",
        [
            _value(n, TensorProto.BOOL, []) if n == "flag" else _value(n, FLOAT, [2, 3])
            for n in inputs
        ],
        [_value(n) for n in outputs],
        [numpy_helper.from_array(v, n) for n, v in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return sonnx.prepare(model).program


def _branch(name: str, source: str) -> onnx.GraphProto:
    node = helper.make_node("Identity", [source], [f"{name}_out"])
    return helper.make_graph([node], name, [], [_value(f"{name}_out")])


def _step(program: GraphProgram, op_type: str) -> int:
    (found,) = [i for i, s in enumerate(program.steps) if s.info.op_type == op_type]
    return found


def test_producers_and_each_read_at_its_input_position() -> None:
    program = _program(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Mul", ["r", "r"], ["m"]),
            helper.make_node("Add", ["m", "x"], ["y"]),
        ],
        ["y"],
    )
    index = program.index
    relu, mul, add = (_step(program, op) for op in ("Relu", "Mul", "Add"))
    assert dict(index.producer) == {"r": relu, "m": mul, "y": add}
    assert index.uses["r"] == (Use(mul, 0), Use(mul, 1))
    assert index.uses["x"] == (Use(relu, 0), Use(add, 1))
    assert list(index.uses) == ["x", "r", "m"]  # in the order first read
    assert index.readers("r") == (mul, mul)  # once per read
    assert index.readers("y") == () and index.outputs == {"y"}


def test_only_reader_needs_one_read_and_no_graph_output() -> None:
    program = _program(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Neg", ["r"], ["n"]),
            helper.make_node("Mul", ["n", "n"], ["m"]),
            helper.make_node("Abs", ["m"], ["y"]),
        ],
        ["y", "r"],
    )
    index = program.index
    assert index.only_reader("x") == _step(program, "Relu")
    assert index.only_reader("m") == _step(program, "Abs")
    assert index.only_reader("r") is None  # read by Neg, and returned
    assert index.only_reader("n") is None  # Mul reads it twice
    assert index.only_reader("y") is None  # read by no step


def test_subgraph_bodies_reads_of_the_enclosing_scope_are_reads_of_their_step() -> None:
    """An If's two branches each read ``r``: two reads by the If, at no input position; a Loop
    whose body holds an If reading ``n`` reads ``n`` itself (nested bodies)."""
    inner_if = helper.make_node(
        "If", ["flag"], ["inner"], then_branch=_branch("a", "n"), else_branch=_branch("b", "n")
    )
    body = helper.make_graph(
        [helper.make_node("Identity", ["go"], ["go_on"]), inner_if],
        "body",
        [_value("trip", TensorProto.INT64, []), _value("go", TensorProto.BOOL, [])],
        [_value("go_on", TensorProto.BOOL), _value("inner")],
    )
    program = _program(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Neg", ["x"], ["n"]),
            helper.make_node(
                "If", ["flag"], ["y"], then_branch=_branch("t", "r"), else_branch=_branch("f", "r")
            ),
            helper.make_node("Loop", ["trips", ""], ["each"], body=body),
        ],
        ["y", "each"],
        {"trips": np.array(2, np.int64)},
        inputs=("x", "flag"),
    )
    index = program.index
    branching, loop = _step(program, "If"), _step(program, "Loop")
    assert index.uses["r"] == (Use(branching, None), Use(branching, None))
    assert index.uses["n"] == (Use(loop, None),)
    assert Use(loop, None) in index.uses["flag"]  # the inner If's condition
    assert index.only_reader("r") is None and index.only_reader("n") == loop
    (loop_body,) = [v for v in program.steps[loop].attrs.values() if isinstance(v, Subgraph)]
    assert loop_body.program.outer_names() == ["flag", "n"]


def test_read_only_at_allows_the_positions_given_and_never_a_subgraph_read() -> None:
    program = _program(
        [
            helper.make_node("Pow", ["x", "e"], ["p"]),
            helper.make_node("Pow", ["p", "f"], ["q"]),
            helper.make_node("Add", ["q", "f"], ["s"]),
            helper.make_node(
                "If", ["flag"], ["y"], then_branch=_branch("t", "g"), else_branch=_branch("u", "s")
            ),
        ],
        ["y"],
        {n: np.full([2, 3], 2.0, np.float32) for n in ("e", "f", "g")},
        inputs=("x", "flag"),
    )
    index = program.index
    pows = {i for i, s in enumerate(program.steps) if s.info.op_type == "Pow"}

    def exponent(step: int) -> frozenset[int]:
        return frozenset({1}) if step in pows else frozenset()

    assert index.read_only_at("e", exponent)
    assert not index.read_only_at("f", exponent)  # the Add reads it too
    assert not index.read_only_at("g", exponent)  # a branch reads it
    assert not index.read_only_at("unread", exponent)


def test_the_index_is_built_again_after_a_pass_rewires_the_steps() -> None:
    """The statistics pass gives a running variance shared with a scale through Identity a
    buffer of its own, and the BatchNormalization reads that instead: the index the later
    passes and the schedule read says so."""
    inits = {n: np.full(3, 1.0, np.float32) for n in ("scale", "bias", "mean")}
    program = _program(
        [
            helper.make_node("Identity", ["scale"], ["var"]),
            helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"]),
        ],
        ["y"],
        inits,
    )
    norm = _step(program, "BatchNormalization")
    renamed = program.steps[norm].inputs[4]
    assert renamed != "var" and renamed in program.constants
    assert program.index.uses[renamed] == (Use(norm, 4),)
    assert program.index.readers("var") == ()
    before = program.index
    assert program.index is before  # built once per wiring
    program.wiring_changed()
    assert program.index is not before
    assert dict(program.index.uses) == dict(before.uses)


def test_an_index_of_steps_given_directly() -> None:
    """The index needs only the steps' inputs, outputs and subgraph reads."""
    program = _program([helper.make_node("Relu", ["x"], ["y"])], ["y"])
    index = ProgramIndex(program.steps, ["y", "x"])
    assert index.outputs == {"x", "y"} and index.only_reader("x") is None
