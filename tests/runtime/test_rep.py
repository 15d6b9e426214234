"""prepare / SingaRep: running, cutting (last_layers, output=), extra outputs and bad models."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import sonnx
import sonnx.autograd as autograd
from sonnx.errors import BadInputError, BadModelError, UnsupportedOperatorError
from sonnx.runtime import input_binding
from sonnx.tensor import Tensor, to_numpy


def _chain_model() -> onnx.ModelProto:
    """x -> Relu -> (Constant 3) Mul -> Add(b) -> Neg, with a symbolic batch dimension.

    Layers (Constant excluded): 0 Relu "r", 1 Mul "m", 2 Add "a", 3 Neg "y".
    """
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node(
            "Constant",
            [],
            ["three"],
            name="three",
            value=numpy_helper.from_array(np.array(3.0, np.float32)),
        ),
        helper.make_node("Mul", ["r", "three"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Neg", ["a"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


X = np.array([[-1.0, 0.5, 2.0, -3.0]], dtype=np.float32)
B = np.arange(4, dtype=np.float32)
R = np.maximum(X, 0)


def test_run_whole_model_and_each_cut() -> None:
    rep = sonnx.prepare(_chain_model())
    np.testing.assert_allclose(to_numpy(rep.run([X])[0]), -(3 * R + B))
    np.testing.assert_allclose(to_numpy(rep.run([X], last_layers=-2)[0]), 3 * R + B)
    np.testing.assert_allclose(to_numpy(rep.run([X], last_layers=-3)[0]), 3 * R)
    np.testing.assert_allclose(to_numpy(rep.run([X], last_layers=-4)[0]), R)


def test_output_by_name_all_outputs_and_aux_output() -> None:
    rep = sonnx.prepare(_chain_model())
    np.testing.assert_allclose(to_numpy(rep.run({"x": X}, output="m")[0]), 3 * R)
    everything = rep.run([X], all_outputs=True)
    assert list(everything) == ["r", "m", "a", "y"]
    y, r, a = rep.run([X], aux_output=("r", "a"))
    np.testing.assert_allclose(to_numpy(r), R)
    np.testing.assert_allclose(to_numpy(a), 3 * R + B)
    np.testing.assert_allclose(to_numpy(y), -(3 * R + B))


def test_same_rep_runs_batch_1_and_64() -> None:
    rep = sonnx.prepare(_chain_model())
    big = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    assert rep.run([X])[0].shape == (1, 4)
    np.testing.assert_allclose(to_numpy(rep.run([big])[0]), -(3 * np.maximum(big, 0) + B))


def test_summary_lists_layers_with_their_cut_values() -> None:
    text = sonnx.prepare(_chain_model()).summary()
    lines = text.splitlines()[1:]
    assert [line.split()[2] for line in lines] == ["Relu", "Mul", "Add", "Neg"]
    assert [int(line.split()[1]) for line in lines] == [-4, -3, -2, -1]
    assert "Constant" not in text


def test_print_and_repr_name_each_nodes_output_tensors() -> None:
    """``output=`` takes tensor names, so the listing shows them beside the node names."""
    rep = sonnx.prepare(_chain_model())
    header, *lines = str(rep).splitlines()
    assert header.split()[3:] == ["name", "outputs", "shape"]
    assert [line.split()[4] for line in lines] == ["r", "m", "a", "y"]
    assert all(line.endswith(" (N, 4)") for line in lines)
    assert repr(rep) == "<SingaRep 4 layers on Device('cpu'); inputs x: float32 (N, 4); outputs y>"


def test_float_initializers_are_trainable_parameters() -> None:
    rep = sonnx.prepare(_chain_model())
    assert set(rep.params) == {"b"}
    autograd.training = True
    y = rep.run([X])[0]
    grads = dict((p.name, to_numpy(g)) for p, g in autograd.backward(y))
    np.testing.assert_allclose(grads["b"], -np.ones(4, np.float32))
    rep.tensor_map["b"].stores_grad = False
    assert rep.params == {}


def test_bad_inputs_name_the_input_and_what_was_expected() -> None:
    rep = sonnx.prepare(_chain_model())
    expects = r"input 'x' expects float32 \(N, 4\), received float64 with shape \(1, 4\)"
    with pytest.raises(BadInputError, match=expects + r"; cast it with x.astype\(np.float32\)"):
        rep.run([X.astype(np.float64)])
    with pytest.raises(BadInputError, match=r"received float64 .*x.as_type\('float32'\)"):
        rep.run([Tensor(data=X.astype(np.float64), requires_grad=False)])
    with pytest.raises(BadInputError, match=r"np.asarray\(x, dtype=np.float32\)"):
        rep.run([[[1, 2, 3, 4]]])
    with pytest.raises(BadInputError, match=r"'x'.*received shape \(4,\)"):
        rep.run([X[0]])
    with pytest.raises(BadInputError, match="unknown input"):
        rep.run({"nope": X})
    with pytest.raises(BadInputError, match="last_layers"):
        rep.run([X], last_layers=-5)
    with pytest.raises(BadInputError, match="no node produces"):
        rep.run([X], output="missing")


def test_plain_arrays_are_bound_as_the_general_path_binds_them() -> None:
    """A list of C-ordered, writable arrays of the declared type and rank is bound in one short
    loop, sharing the arrays' memory; every other input takes the general path, as before."""
    rep = sonnx.prepare(_chain_model())
    x = X.copy()
    bound = input_binding.bind_inputs([x], rep.input_specs, rep.device)
    assert bound["x"].data.data_ptr() == x.ctypes.data and not bound["x"].requires_grad
    assert input_binding._bind_plain_arrays([x], rep.input_specs) is not None
    read_only = X.copy()
    read_only.flags.writeable = False
    strided = np.repeat(X, 2, axis=1)[:, ::2]
    for other in ([read_only], [strided], [X.astype(np.float64)], [X[0]], [x, x], [[1.0]]):
        assert input_binding._bind_plain_arrays(other, rep.input_specs) is None
    for given in ([read_only], [strided], (x,), {"x": x}):
        np.testing.assert_array_equal(to_numpy(rep.run(given)[0]), -(R * 3 + B))
    with pytest.raises(BadInputError, match=r"takes 1 input"):
        rep.run([x, x])


def test_truncated_and_foreign_files_are_reported(tmp_path) -> None:
    data = _chain_model().SerializeToString()
    truncated = tmp_path / "cut.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadModelError):
        sonnx.prepare(truncated)
    foreign = tmp_path / "notes.onnx"
    foreign.write_text("this is not a model")
    with pytest.raises(BadModelError):
        sonnx.prepare(foreign)
    with pytest.raises(BadModelError, match="not found"):
        sonnx.prepare(tmp_path / "missing.onnx")


def test_cycle_and_undefined_input_are_reported() -> None:
    out = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1])]
    cyclic = helper.make_graph(
        [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])],
        "g",
        [],
        out,
    )
    with pytest.raises(BadModelError, match="cycle"):
        sonnx.prepare(helper.make_model(cyclic))
    dangling = helper.make_graph([helper.make_node("Relu", ["zz"], ["a"])], "g", [], out)
    with pytest.raises(BadModelError, match="'zz'"):
        sonnx.prepare(helper.make_model(dangling))


def test_all_unsupported_nodes_are_reported_together() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph(
        [
            helper.make_node("FooOp", ["x"], ["a"], name="first"),
            helper.make_node("BarOp", ["a"], ["b"], name="second"),
        ],
        "g",
        [x],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])],
    )
    with pytest.raises(UnsupportedOperatorError) as info:
        sonnx.prepare(helper.make_model(graph))
    assert "FooOp" in str(info.value) and "BarOp" in str(info.value)
    assert "'first'" in str(info.value) and "'second'" in str(info.value)


def test_sonnx_tensor_inputs_are_accepted() -> None:
    rep = sonnx.prepare(_chain_model())
    y = rep.run([Tensor(data=X, requires_grad=False)])[0]
    np.testing.assert_allclose(to_numpy(y), -(3 * R + B))


def test_debug_switch_traces_each_node(monkeypatch, capsys) -> None:
    monkeypatch.setenv("SONNX_DEBUG", "1")
    sonnx.prepare(_chain_model()).run([X])
    err = capsys.readouterr().err
    assert err.count("[sonnx]") == 5 and "Relu" in err and "ms" in err  # the run's path, 4 nodes
    assert err.startswith("[sonnx] run: the program")


@pytest.mark.parametrize("declared", [-1, 0, None])
def test_minus_one_zero_and_missing_dims_mean_any_size(declared) -> None:
    # paddle2onnx writes x: [-1, 3, ?, ?]; onnxruntime takes any size there, and so must sonnx.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [declared, 3, 2])
    if declared is None:
        x.type.tensor_type.shape.dim[0].Clear()
    else:
        x.type.tensor_type.shape.dim[0].dim_value = declared
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    rep = sonnx.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    data = np.linspace(-1, 1, 5 * 3 * 2, dtype=np.float32).reshape(5, 3, 2)
    np.testing.assert_array_equal(to_numpy(rep.run([data])[0]), np.maximum(data, 0))
    with pytest.raises(BadInputError, match=r"input 'x' expects .*received shape \(5, 4, 2\)"):
        rep.run([np.zeros((5, 4, 2), np.float32)])


def _large_weight_model() -> onnx.ModelProto:
    """x (N, 32) @ w (32 x 32 floats: 4 KiB, kept without its bytes) -> y."""
    w = np.random.default_rng(1).standard_normal((32, 32)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 32])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_prepare_rewritten_runs_a_rewrite_of_the_kept_model_over_the_reps_own_weights() -> None:
    from sonnx.runtime.rep import prepare_rewritten

    rep = sonnx.prepare(_large_weight_model())
    rewrite = onnx.ModelProto()
    rewrite.CopyFrom(rep.model)  # its weight a header without bytes
    rewrite.graph.node[0].output[0] = "xw"
    rewrite.graph.node.append(helper.make_node("Neg", ["xw"], ["y"], name="neg"))
    fresh = prepare_rewritten(rewrite, rep)
    assert fresh.constants["w"].data.data_ptr() == rep.constants["w"].data.data_ptr()
    assert fresh.params["w"].is_param
    x = np.random.default_rng(2).standard_normal((3, 32)).astype(np.float32)
    np.testing.assert_array_equal(to_numpy(fresh.run([x])[0]), -to_numpy(rep.run([x])[0]))


def test_prepare_rewritten_names_a_header_without_bytes_that_the_rep_lacks() -> None:
    from sonnx.runtime.rep import prepare_rewritten

    rep = sonnx.prepare(_large_weight_model())
    rewrite = onnx.ModelProto()
    rewrite.CopyFrom(rep.model)
    rewrite.graph.initializer[0].name = "other"
    rewrite.graph.node[0].input[1] = "other"
    with pytest.raises(BadModelError, match="'other'"):
        prepare_rewritten(rewrite, rep)
