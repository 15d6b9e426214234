"""Weights outside the initializers train too (issue 47, items 1 and 2): those that Constant
nodes hold, as tf2onnx and paddle2onnx write them, and those inside If branches. They are
parameters (``rep.params``, ``sonnx info``, ``SONNXModel``), get gradients (through the branch
that ran), and export writes each back where it came from; onnxruntime runs the export.

Stand-ins: a torch-exported CNN whose initializers were turned into Constant nodes, and a
model whose two If branches each hold a weight (an initializer in one, a Constant in the other).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx import autograd, layer, opt, tensor
from sonnx.cli import main
from sonnx.errors import BadInputError
from sonnx.runtime.rep import prepare_rewritten
from sonnx.tensor import Tensor, to_numpy
from sonnx.testing import torch_models as tm

RNG = np.random.default_rng(0)
X = RNG.standard_normal((8, 3, 16, 16)).astype(np.float32)
Y = RNG.integers(0, 10, 8).astype(np.int32)


def as_constant_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every initializer turned into a Constant node, as tf2onnx and
    paddle2onnx write weights; plus a one-element Constant (a scale) and a shape Constant."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    constants = [
        helper.make_node("Constant", [], [init.name], name=f"const_{k}", value=init)
        for k, init in enumerate(model.graph.initializer)
    ]
    del out.graph.initializer[:]
    final = out.graph.output[0].name
    out.graph.node[-1].output[0] = "unscaled"
    scale = numpy_helper.from_array(np.array([0.5], np.float32), "half")
    shape = numpy_helper.from_array(np.array([-1, 10], np.int64), "shape")
    tail = [
        helper.make_node("Constant", [], ["half"], value=scale),
        helper.make_node("Mul", ["unscaled", "half"], ["scaled"]),
        helper.make_node("Constant", [], ["shape"], value=shape),
        helper.make_node("Reshape", ["scaled", "shape"], [final]),
    ]
    nodes = [*constants, *out.graph.node, *tail]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    onnx.checker.check_model(out)
    return out


@pytest.fixture(scope="module")
def constant_cnn() -> onnx.ModelProto:
    torch.manual_seed(0)
    return as_constant_nodes(tm.export(tm.SmallCNN(), (torch.from_numpy(X),), 17, ["image"]))


def _step(rep: sonnx.SingaRep, sgd: opt.SGD) -> float:
    autograd.training = True
    try:
        loss = autograd.softmax_cross_entropy(rep.run([X])[0], tensor.from_numpy(Y))
        sgd(loss)
    finally:
        autograd.training = False
    return to_numpy(loss).item()


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


# ---- 1. Constant nodes -------------------------------------------------------------------------
def test_constant_nodes_holding_weights_are_the_parameters(constant_cnn) -> None:
    rep = sonnx.prepare(constant_cnn)
    weights = {
        i.name
        for i in tm.export(tm.SmallCNN(), (torch.from_numpy(X),), 17, ["image"]).graph.initializer
    }
    assert set(rep.params) == weights
    assert set(rep.tensor_map) == weights
    # a one-element scale and an integer shape stay constants
    assert not rep.constants["half"].stores_grad and not rep.constants["shape"].stores_grad


def test_training_moves_constant_weights_and_export_writes_them_back(constant_cnn) -> None:
    rep = sonnx.prepare(constant_cnn)
    before = {n: to_numpy(t).copy() for n, t in rep.params.items()}
    sgd = opt.SGD(lr=0.05, momentum=0.9)
    losses = [_step(rep, sgd) for _ in range(8)]
    assert losses[-1] < losses[0]
    assert all(not np.array_equal(before[n], to_numpy(t)) for n, t in rep.params.items())

    expected = to_numpy(rep.run([X])[0])
    image = tensor.from_numpy(X)
    exported = sonnx.to_onnx([image], rep.run([image]))
    assert not exported.graph.initializer  # the weights went back into their Constant nodes
    assert [n.op_type for n in exported.graph.node] == [n.op_type for n in constant_cnn.graph.node]
    name = exported.graph.input[0].name
    np.testing.assert_allclose(_ort(exported, {name: X}), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_ort(rep.current_model(), {"image": X}), expected, atol=1e-5)


def test_sonnx_info_counts_constant_weights(constant_cnn, tmp_path, capsys) -> None:
    path = tmp_path / "constant_cnn.onnx"
    onnx.save(constant_cnn, str(path))
    assert main(["info", str(path)]) == 0
    count = sum(t.size() for t in sonnx.prepare(constant_cnn).params.values())
    assert f"parameters: 6 tensors, {count:,} values" in capsys.readouterr().out


def test_sonnx_model_freezes_and_lists_constant_weights(constant_cnn) -> None:
    net = sonnx.SONNXModel(constant_cnn)
    assert set(net.get_params()) == set(net.rep.params)
    assert net.freeze("head.") == 2
    assert set(net.get_params()) == set(net.rep.params)  # frozen ones are still parameters
    assert not net.rep.params["head.2.weight"].requires_grad


def test_a_step_on_a_model_with_no_trainable_weight_says_why() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
    )
    rep = sonnx.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    autograd.training = True
    try:
        loss = autograd.softmax_cross_entropy(rep.run([np.ones((2, 10), np.float32)])[0], Y[:2])
        with pytest.raises(
            BadInputError, match=r"no trainable parameter.*holds no trainable weight"
        ):
            opt.SGD(lr=0.1)(loss)
    finally:
        autograd.training = False


def test_a_step_with_every_weight_frozen_says_so(constant_cnn) -> None:
    rep = sonnx.prepare(constant_cnn)
    for t in rep.params.values():
        t.requires_grad = False
    with pytest.raises(BadInputError, match="all 6 weights of the imported model are frozen"):
        _step(rep, opt.SGD(lr=0.1))


# ---- 2. If branches ----------------------------------------------------------------------------
def _branch(name: str, weight: np.ndarray, as_constant: bool) -> onnx.GraphProto:
    tensor_value = numpy_helper.from_array(weight, f"{name}_w")
    nodes = [helper.make_node("MatMul", ["x", f"{name}_w"], [f"{name}_y"])]
    if as_constant:
        nodes.insert(0, helper.make_node("Constant", [], [f"{name}_w"], value=tensor_value))
    out = [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)]
    return helper.make_graph(nodes, name, [], out, [] if as_constant else [tensor_value])


@pytest.fixture(scope="module")
def if_model() -> onnx.ModelProto:
    """y = x @ then_w if cond else x @ else_w; then_w an initializer of the then branch,
    else_w a Constant node of the else branch."""
    then_w = RNG.standard_normal((4, 3)).astype(np.float32)
    else_w = RNG.standard_normal((4, 3)).astype(np.float32)
    node = helper.make_node(
        "If",
        ["cond"],
        ["y"],
        then_branch=_branch("then", then_w, as_constant=False),
        else_branch=_branch("else", else_w, as_constant=True),
    )
    graph = helper.make_graph(
        [node],
        "branches",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_weights_inside_if_branches_are_parameters_trained_through_the_branch_run(
    if_model,
) -> None:
    rep = sonnx.prepare(if_model)
    assert set(rep.params) == {"then_w", "else_w"}
    x = RNG.standard_normal((6, 4)).astype(np.float32)
    labels = tensor.from_numpy(RNG.integers(0, 3, 6).astype(np.int32))
    for cond, ran, idle in ((True, "then_w", "else_w"), (False, "else_w", "then_w")):
        autograd.training = True
        try:
            loss = autograd.softmax_cross_entropy(rep.run([x, np.array(cond)])[0], labels)
            grads = {p.name: g for p, g in autograd.backward(loss)}
        finally:
            autograd.training = False
        assert set(grads) == {ran}, (cond, set(grads))
        before = {n: to_numpy(t).copy() for n, t in rep.params.items()}
        sgd = opt.SGD(lr=0.5)
        sgd.update(rep.params[ran], grads[ran])
        sgd.step()
        assert not np.array_equal(before[ran], to_numpy(rep.params[ran]))
        np.testing.assert_array_equal(before[idle], to_numpy(rep.params[idle]))


@pytest.mark.parametrize("as_constant", [True, False], ids=["constant_node", "initializer"])
def test_an_outer_weight_only_a_branch_reads_is_a_parameter(as_constant) -> None:
    """y = x @ w in either branch, w of the enclosing graph: the branch reads it as an operand,
    so it trains whether a Constant node or an initializer holds it (a Constant node's used to
    stay a constant: the pass saw only the nodes' own inputs, not what branches read)."""
    rng = np.random.default_rng(5)  # not the module's: the tests after this one keep theirs
    w = rng.standard_normal((4, 3)).astype(np.float32)

    def branch(name: str) -> onnx.GraphProto:
        node = helper.make_node("MatMul", ["x", "w"], [f"{name}_y"])
        out = helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)
        return helper.make_graph([node], name, [], [out])

    nodes = [
        helper.make_node("If", ["cond"], ["y"], then_branch=branch("t"), else_branch=branch("e"))
    ]
    if as_constant:
        value = numpy_helper.from_array(w, "w")
        nodes.insert(0, helper.make_node("Constant", [], ["w"], value=value))
    graph = helper.make_graph(
        nodes,
        "outer_weight",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [] if as_constant else [numpy_helper.from_array(w, "w")],
    )
    rep = sonnx.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert set(rep.params) == {"w"}
    x = rng.standard_normal((5, 4)).astype(np.float32)
    autograd.training = True
    try:
        loss = autograd.reduce_sum(rep.run([x, np.array(True)])[0])
        grads = {p.name: to_numpy(g) for p, g in autograd.backward(loss)}
    finally:
        autograd.training = False
    np.testing.assert_allclose(grads["w"], np.repeat(x.sum(0)[:, None], 3, 1), rtol=1e-5)


def test_trained_branch_weights_export_in_place(if_model) -> None:
    rep = sonnx.prepare(if_model)
    with torch.no_grad():
        for t in rep.params.values():
            t.data.mul_(-2.0)  # as a training step would change them
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    given = [tensor.from_numpy(x), tensor.from_numpy(np.array(True))]
    exports = [sonnx.to_onnx(given, rep.run(given)), rep.current_model()]
    for exported in exports:
        assert not exported.graph.initializer and len(exported.graph.node) == 1
        branches = {a.name: a.g for a in exported.graph.node[0].attribute}
        assert [i.name for i in branches["then_branch"].initializer] == ["then_w"]
        assert branches["else_branch"].node[0].op_type == "Constant"
        assert [i.name for i in exported.graph.input] == ["x", "cond"]
        for cond in (True, False):
            feeds = {"x": x, "cond": np.array(cond)}
            expected = to_numpy(rep.run(feeds)[0])
            np.testing.assert_allclose(_ort(exported, feeds), expected, rtol=1e-5, atol=1e-6)


def test_sonnx_model_trains_a_branch_weight_with_a_head(if_model) -> None:
    class Head(sonnx.SONNXModel):
        def __init__(self, onnx_model: onnx.ModelProto) -> None:
            super().__init__(onnx_model)
            self.fc = layer.Linear(2)

        def forward(self, x: Tensor, cond: Tensor) -> Tensor:
            return self.fc(super().forward(x, cond)[0])

    net = Head(if_model)
    x = tensor.from_numpy(RNG.standard_normal((6, 4)).astype(np.float32))
    cond = tensor.from_numpy(np.array(True))
    net.compile([x, cond], is_train=False)
    assert {"then_w", "else_w", "fc.W", "fc.b"} <= set(net.get_params())
    assert net.freeze("then_w") == 1 and not net.rep.params["then_w"].requires_grad


def test_a_loop_body_weight_trains_through_every_iteration_and_exports_in_place() -> None:
    """h = tanh(h @ w) three times; w a Constant node of the Loop body."""
    w = numpy_helper.from_array(RNG.standard_normal((4, 4)).astype(np.float32) * 0.5, "body_w")
    body = helper.make_graph(
        [
            helper.make_node("Constant", [], ["body_w"], value=w),
            helper.make_node("MatMul", ["h_in", "body_w"], ["product"]),
            helper.make_node("Tanh", ["product"], ["h_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, None),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)],
        "loop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(np.array(3, np.int64), "trips")],
    )
    rep = sonnx.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert set(rep.params) == {"body_w"}
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    before = to_numpy(rep.params["body_w"]).copy()
    losses = [_step_on(rep, x) for _ in range(3)]
    assert losses[-1] < losses[0]
    assert not np.array_equal(before, to_numpy(rep.params["body_w"]))
    given = tensor.from_numpy(x)
    exported = sonnx.to_onnx([given], rep.run([given]))
    body_out = next(a.g for a in exported.graph.node[0].attribute if a.name == "body")
    assert body_out.node[0].op_type == "Constant"
    np.testing.assert_allclose(
        _ort(exported, {exported.graph.input[0].name: x}),
        to_numpy(rep.run([x])[0]),
        rtol=1e-5,
        atol=1e-6,
    )


def _step_on(rep: sonnx.SingaRep, x: np.ndarray) -> float:
    """One SGD step pulling ``rep``'s output towards zeros."""
    autograd.training = True
    try:
        out = rep.run([x])[0]
        loss = autograd.mse_loss(out, tensor.from_numpy(np.zeros(out.shape, np.float32)))
        opt.SGD(lr=0.5)(loss)
    finally:
        autograd.training = False
    return to_numpy(loss).item()


def test_a_model_prepared_again_keeps_trained_constant_and_branch_weights(
    if_model, constant_cnn
) -> None:
    """``prepare_rewritten`` (what ``lora.add`` calls) shares the storage of every weight."""
    for model in (if_model, constant_cnn):
        rep = sonnx.prepare(model)
        with torch.no_grad():
            for t in rep.params.values():
                t.data.add_(1.0)  # as training would change them
        again = prepare_rewritten(rep.model, rep)
        assert set(again.params) == set(rep.params)
        for name, t in rep.params.items():
            assert again.params[name].data.data_ptr() == t.data.data_ptr(), name


def test_value_floats_weights_train_and_sparse_constants_stay_constants() -> None:
    """A ``value_floats`` Constant is written back as ``value_floats``; a ``sparse_value`` one
    (which an export would write back sparse, as it came) is a constant."""
    dense = np.array([0.0, 2.0, 0.0, 3.0], np.float32)
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([2.0, 3.0], np.float32), "shift"),
        numpy_helper.from_array(np.array([1, 3], np.int64), "shift_indices"),
        [4],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["scale"], value_floats=[1.0, 0.5, 2.0, -1.0]),
            helper.make_node("Constant", [], ["shift"], sparse_value=sparse),
            helper.make_node("Mul", ["x", "scale"], ["scaled"]),
            helper.make_node("Add", ["scaled", "shift"], ["y"]),
        ],
        "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    rep = sonnx.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert set(rep.params) == {"scale"}
    np.testing.assert_array_equal(to_numpy(rep.constants["shift"]), dense)
    x = RNG.standard_normal((6, 4)).astype(np.float32)
    _step_on(rep, x)
    trained = to_numpy(rep.params["scale"])
    assert not np.allclose(trained, [1.0, 0.5, 2.0, -1.0])
    written = next(n for n in rep.current_model().graph.node if n.output[0] == "scale")
    assert written.attribute[0].name == "value_floats"
    np.testing.assert_allclose(written.attribute[0].floats, trained)
