"""Shape arithmetic runs once per input signature; value-sized shapes are never reused."""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx.runtime.shape_values import shape_value_steps
from sonnx.tensor import to_numpy
from tests.onnx.export_check import ort_session
from tests.onnx.imported_families import bert


def _counting(rep: sonnx.SingaRep, monkeypatch) -> list[str]:
    calls: list[str] = []
    for step in rep.steps:
        if step.op is not None:
            forward = step.op.forward

            def counted(*xs, _forward=forward, _name=step.info.name):
                calls.append(_name)
                return _forward(*xs)

            monkeypatch.setattr(step.op, "forward", counted)
    return calls


def test_a_bert_encoder_computes_its_shape_values_once_per_signature(monkeypatch) -> None:
    family = bert()
    rep = sonnx.prepare(family.model)
    shape_steps = {rep.steps[i].info.name for i in rep.program.shape_value_steps}
    assert len(shape_steps) > 20
    assert {rep.steps[i].info.op_type for i in rep.program.shape_value_steps} >= {"Shape"}
    calls = _counting(rep, monkeypatch)
    session = ort_session(family.model)
    runs = [((2, 0), True), ((2, 0), False), ((3, 1), True), ((2, 0), False), ((3, 1), False)]
    for (batch, variant), new_signature in runs:
        feeds = family.make(batch, variant)
        calls.clear()
        ours = to_numpy(rep.run(feeds)[0])
        np.testing.assert_allclose(ours, session.run(None, feeds)[0], rtol=1e-5, atol=1e-5)
        assert bool(shape_steps & set(calls)) == new_signature


def test_values_sized_by_data_are_not_reused() -> None:
    # y = Reshape(w, Concat(Shape(w)[1:2], [-1])) with w = NonZero(x > 0), shape (1, count):
    # the target shape depends on x's values.
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["positive"]),
        helper.make_node("NonZero", ["positive"], ["where"]),
        helper.make_node("Shape", ["where"], ["where_shape"]),
        helper.make_node("Slice", ["where_shape", "one", "two"], ["count"]),
        helper.make_node("Concat", ["count", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["where", "target"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [
            helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
            helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1]),
            helper.make_tensor("one", TensorProto.INT64, [1], [1]),
            helper.make_tensor("two", TensorProto.INT64, [1], [2]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rep = sonnx.prepare(model)
    assert shape_value_steps(rep.steps, rep.constants, {"x"}) == set()
    first = to_numpy(rep.run([np.array([1, -1, 2, -3], np.float32)])[0])
    second = to_numpy(rep.run([np.array([1, 1, 2, -3], np.float32)])[0])
    assert first.shape == (2, 1) and second.shape == (3, 1)


def test_a_cut_run_does_not_store_partial_shape_values() -> None:
    family = bert()
    rep = sonnx.prepare(family.model)
    feeds = family.make(2, 0)
    rep.run(feeds, last_layers=-20)
    whole = to_numpy(rep.run(feeds)[0])
    np.testing.assert_allclose(
        whole, ort_session(family.model).run(None, feeds)[0], rtol=1e-5, atol=1e-5
    )
    assert isinstance(rep.model, onnx.ModelProto)


def test_shape_values_from_a_changed_constant_are_computed_again() -> None:
    """A row of an int8 table dequantized by constants alone (Cast, Mul by a scale) and picked
    by the batch size is a shape value; after the table or its scale changes in place (as
    ``load_states`` writes them) the next run computes it from the new values."""
    from onnx import numpy_helper

    from sonnx.sonnx_model import SONNXModel

    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["q"], ["table_raw"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["table_raw", "scale"], ["table"]),
            helper.make_node("Shape", ["x"], ["x_shape"]),
            helper.make_node("Gather", ["x_shape", "zero"], ["batch"]),
            helper.make_node("Gather", ["table", "batch"], ["row"]),
            helper.make_node("Mul", ["x", "row"], ["y"]),
        ],
        "int8_rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array([5, -3, 7, 2], np.int8), "q"),
            numpy_helper.from_array(np.array(0.5, np.float32), "scale"),
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
        ],
    )
    model = SONNXModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = np.ones((2, 3), np.float32)
    for _ in range(3):  # the step loop, then the plan with the shape value kept
        np.testing.assert_array_equal(to_numpy(model.forward(x)[0]), np.full((2, 3), 3.5))
    model.set_states({"q": np.array([0, 0, 4, 0], np.int8)})
    np.testing.assert_array_equal(to_numpy(model.forward(x)[0]), np.full((2, 3), 2.0))
    model.set_states({"scale": np.array(2.0, np.float32)})
    for _ in range(2):
        np.testing.assert_array_equal(to_numpy(model.forward(x)[0]), np.full((2, 3), 8.0))


def test_shapes_after_a_resize_by_constant_scales_are_shape_values() -> None:
    """A detection head's grid comes from the shape of a feature map upsampled by constant
    float scales: Shape -> Gather -> Range on it is fixed by the input signature, computed
    once per input size, and again after the scales change in place."""
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    graph = helper.make_graph(
        [
            helper.make_node(
                "Constant",
                [],
                ["scales"],
                value=numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32)),
            ),
            helper.make_node("Resize", ["x", "", "scales"], ["up"], mode="nearest"),
            helper.make_node("Shape", ["up"], ["up_shape"]),
            helper.make_node("Gather", ["up_shape", "last"], ["width"]),
            helper.make_node("Range", ["start", "width", "step"], ["grid"]),
            helper.make_node("Cast", ["grid"], ["grid_f"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["up", "grid_f"], ["y"]),
        ],
        "grid_after_resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(3, np.int64), "last"),
            numpy_helper.from_array(np.array(0, np.int64), "start"),
            numpy_helper.from_array(np.array(1, np.int64), "step"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rep = sonnx.prepare(model)
    names = {rep.steps[i].info.op_type for i in rep.program.shape_value_steps}
    assert {"Shape", "Gather", "Range"} <= names
    for h, w in ((2, 3), (2, 3), (4, 5), (2, 3)):
        x = np.arange(h * w, dtype=np.float32).reshape(1, 1, h, w)
        (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
        np.testing.assert_array_equal(to_numpy(rep.run([x])[0]), expected)
    rep.constants["scales"].data.copy_(torch.tensor([1.0, 1.0, 1.0, 3.0]))
    model.graph.node[0].attribute[0].t.CopyFrom(
        numpy_helper.from_array(np.array([1, 1, 1, 3], np.float32))
    )
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(to_numpy(rep.run([x])[0]), expected)
