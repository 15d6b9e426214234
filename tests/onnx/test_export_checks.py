"""The checks to_onnx holds a graph to (``sonnx.onnx.export_checks``): every output connected
to the inputs, every node an operator of the target opset; each failure names the output or the
op and opset."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import sonnx.autograd as ag
from sonnx.engine.operator import Operator
from sonnx.errors import ExportError, OpsetTooOldError
from sonnx.onnx import export_checks
from sonnx.onnx.export_checks import _UNCHECKED_DOMAIN, check_nodes_exist, check_with_onnx
from sonnx.onnx.exporter import OLDEST_EXPORT_OPSET, to_onnx
from sonnx.onnx.registry import REGISTRY
from sonnx.operators.normalization.contrib_skip import SimplifiedLayerNormalization
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor, to_numpy
from tests.onnx.export_check import ort_session
from tests.onnx.test_export_errors import data


def test_output_not_connected_to_the_inputs_names_the_output() -> None:
    x, other = data(2, 3), data(2, 3, name="other")
    with pytest.raises(
        ExportError, match=r"outputs\[1\] \(Relu, shape \(2, 3\)\) is not connected"
    ):
        to_onnx([x], [ag.relu(x), ag.relu(other)])


def test_leaf_output_that_is_not_an_input() -> None:
    x = data(2, 3)
    with pytest.raises(ExportError, match=r"outputs\[0\] \(stray, shape \(4,\)\) is not connected"):
        to_onnx([x], [data(4, name="stray")])


@pytest.mark.parametrize(
    ("build", "opset", "op"),
    [
        (lambda x: ag.bitcast(x, np.int32), 25, "BitCast"),
        (
            lambda x: ag.causal_conv_with_state(x, data(3, 1, 2, name=None)),
            26,
            "CausalConvWithState",
        ),
        (lambda x: ag.tensor_scatter(x, data(1, 3, 1, name=None)), 23, "TensorScatter"),
    ],
)
def test_op_missing_at_the_target_opset_names_op_and_opset(build, opset: int, op: str) -> None:
    x = data(1, 3, 4)
    y = build(x)
    y = y[0] if isinstance(y, tuple) else y
    with pytest.raises(ExportError, match=rf"{op}.*does not exist at opset {opset}"):
        to_onnx([x], [y], opset=opset)


# ---- strings where the target opset's schema takes none ------------------------------------


def _strings(*values: str, name: str) -> Tensor:
    return Tensor(data=np.array(values), name=name)


def test_string_input_at_an_opset_that_takes_none_names_the_first_that_does() -> None:
    a, b = _strings("a", "b", name="a"), _strings("a", "c", name="b")
    with pytest.raises(OpsetTooOldError, match="Equal reads strings") as caught:
        to_onnx([a, b], [ag.equal(a, b)], opset=18)  # Equal takes strings from opset 19
    assert caught.value.needed == 19


def test_default_opset_rises_to_the_first_that_takes_the_strings() -> None:
    a, b = _strings("a", "b", name="a"), _strings("a", "c", name="b")
    model = to_onnx([a, b], [ag.equal(a, b)])
    assert _default_opset(model) == 19
    (got,) = ort_session(model).run(None, {"a": to_numpy(a), "b": to_numpy(b)})
    np.testing.assert_array_equal(got, [True, False])


def test_numbers_at_the_same_opset_are_not_held_to_the_string_rule() -> None:
    x, y = data(2, name="x"), data(2, name="y")
    model = to_onnx([x, y], [ag.equal(x, y)], opset=18)
    assert _default_opset(model) == 18


def _writes(op_type: str, opset: int, inputs: list[Tensor | None]) -> tuple[GraphBuilder, Operator]:
    """A graph of one ``op_type`` node at ``opset`` and the sonnx operator that wrote it."""
    g = GraphBuilder(opset)
    g.add_node(op_type, [f"in{i}" for i in range(len(inputs))], ["out"])
    op = REGISTRY.operator_class("", op_type)()
    op.inputs = tuple(inputs)
    return g, op


def test_variadic_string_inputs_are_looked_up_under_the_last_formal_input() -> None:
    strings = [_strings("a", name=f"s{i}") for i in range(3)]
    g, op = _writes("Concat", 11, strings)  # one variadic formal input, strings allowed
    check_nodes_exist(g, 0, op)


def test_strings_that_no_opset_takes_are_an_export_error_not_an_opset_to_raise() -> None:
    g, op = _writes("Relu", 18, [_strings("a", name="s")])
    with pytest.raises(ExportError, match=r"Relu reads strings.*at no opset up to") as caught:
        check_nodes_exist(g, 0, op)
    assert not isinstance(caught.value, OpsetTooOldError)


def test_only_the_default_domain_nodes_the_operator_wrote_are_checked() -> None:
    g = GraphBuilder(18)
    g.add_node("BitCast", ["x"], ["earlier"], to=6)  # exists from a later opset only
    g.add_node("Relu", ["earlier"], ["y"])
    g.add_node("NotInOnnx", ["y"], ["z"], domain="com.microsoft")
    op = REGISTRY.operator_class("", "Relu")()
    op.inputs = (data(2),)
    check_nodes_exist(g, 1, op)
    with pytest.raises(OpsetTooOldError, match="BitCast, which does not exist at opset 18"):
        check_nodes_exist(g, 0, op)


# ---- SimplifiedLayerNormalization: run by sonnx in the default domain, unknown to onnx --------


@pytest.mark.parametrize("opset", [None, 11, 18])
def test_sonnx_built_simplified_layer_norm_exports_in_the_default_domain(opset) -> None:
    x = Tensor(data=np.arange(8, dtype=np.float32).reshape(2, 4), requires_grad=False, name="x")
    scale = Tensor(data=np.full(4, 0.5, np.float32), requires_grad=False, name="scale")
    y = SimplifiedLayerNormalization()(x, scale)
    model = to_onnx([x, scale], [y], opset=opset)  # the ONNX checker passes it
    assert [(n.domain, n.op_type) for n in model.graph.node] == [
        ("", "SimplifiedLayerNormalization")
    ]
    assert _default_opset(model) == (OLDEST_EXPORT_OPSET if opset is None else opset)
    assert {o.domain for o in model.opset_import} == {""}
    feeds = {"x": to_numpy(x), "scale": to_numpy(scale)}
    (got,) = ort_session(model).run(None, feeds)
    np.testing.assert_allclose(got, to_numpy(y), rtol=1e-6)


def test_checker_sees_simplified_layer_norm_in_a_domain_of_its_own_and_the_model_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _model("SimplifiedLayerNormalization")
    before = model.SerializeToString()
    checked = _spy_on_the_checker(monkeypatch)
    check_with_onnx(model)
    (seen,) = checked
    assert [n.domain for n in seen.graph.node] == ["", _UNCHECKED_DOMAIN]
    assert (_UNCHECKED_DOMAIN, 1) in {(o.domain, o.version) for o in seen.opset_import}
    assert model.SerializeToString() == before  # the written model is left as it was


def test_checker_rejects_a_default_domain_operator_sonnx_does_not_know() -> None:
    with pytest.raises(ExportError, match=r"checker rejects.*NoSuchOperator"):
        check_with_onnx(_model("NoSuchOperator"))


# ---- models past protobuf's 2 GiB: checked without their weights -------------------------------


def test_below_the_limit_the_checker_reads_the_model_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _model("Relu")
    checked = _spy_on_the_checker(monkeypatch)
    check_with_onnx(model)
    assert checked == [model] and checked[0] is model


def test_past_the_limit_the_checker_reads_the_model_without_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _model("SimplifiedLayerNormalization")
    monkeypatch.setattr(export_checks, "PROTOBUF_LIMIT", model.ByteSize())  # not below it
    checked = _spy_on_the_checker(monkeypatch)
    check_with_onnx(model)
    (seen,) = checked
    assert [i.name for i in seen.graph.initializer] == ["w", "scale"]
    assert all(not i.raw_data for i in seen.graph.initializer)
    assert [list(i.dims) for i in seen.graph.initializer] == [[0], [0]]  # no data, no elements
    assert seen.graph.initializer[0].data_type == onnx.TensorProto.FLOAT
    assert [n.domain for n in seen.graph.node] == ["", _UNCHECKED_DOMAIN]  # both rewrites
    assert all(i.raw_data for i in model.graph.initializer)  # the model keeps its weights
    assert list(model.graph.initializer[0].dims) == [2, 4]


def test_past_the_limit_the_real_checker_passes_a_sound_model_and_rejects_a_broken_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(export_checks, "PROTOBUF_LIMIT", 1)
    check_with_onnx(_model("Relu"))
    broken = _model("Relu")
    broken.graph.node[1].input[0] = "undefined"
    with pytest.raises(ExportError, match=r"checker rejects.*undefined"):
        check_with_onnx(broken)


def test_past_the_limit_to_onnx_checks_and_returns_the_model_with_its_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(export_checks, "PROTOBUF_LIMIT", 1)
    x = data(2, 3)
    w = Tensor(data=np.arange(12, dtype=np.float32).reshape(3, 4), stores_grad=True, name="w")
    y = ag.matmul(x, w)
    model = to_onnx([x], [y])
    assert numpy_helper.to_array(model.graph.initializer[0]).shape == (3, 4)
    (got,) = ort_session(model).run(None, {"x": to_numpy(x)})
    np.testing.assert_allclose(got, to_numpy(y))


def _model(op_type: str) -> onnx.ModelProto:
    """``y = op_type(x + w[, scale])`` at opset 17, with weights stored as raw data."""
    second = ["h", "scale"] if op_type == "SimplifiedLayerNormalization" else ["h"]
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["h"]), helper.make_node(op_type, second, ["y"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])],
        [
            numpy_helper.from_array(np.ones((2, 4), np.float32), "w"),
            numpy_helper.from_array(np.ones(4, np.float32), "scale"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _spy_on_the_checker(monkeypatch: pytest.MonkeyPatch) -> list[onnx.ModelProto]:
    """The models ``check_with_onnx`` hands the real ONNX checker, in order."""
    seen: list[onnx.ModelProto] = []
    real = onnx.checker.check_model

    def check_model(model: onnx.ModelProto, *args, **kwargs) -> None:
        seen.append(model)
        real(model, *args, **kwargs)

    monkeypatch.setattr(onnx.checker, "check_model", check_model)
    return seen


def _default_opset(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
