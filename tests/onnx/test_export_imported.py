"""Export of imported models is a fixed point: the original graph, pruned at a cut, joined to
appended layers, with the current weights, runs in onnxruntime at shapes, branches and trip
counts other than the example's."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import sonnx
from sonnx import autograd, layer, opt
from sonnx.runtime.constants import STATISTICS_SUFFIX
from sonnx.tensor import Tensor, to_numpy
from tests.onnx.imported_families import FAMILIES, Family

F = np.float32

# Families whose example run differs from the other feeds in more than the batch size.
OTHER_VARIANT = 1


def _tensors(feeds: dict[str, np.ndarray]) -> dict[str, Tensor]:
    return {n: Tensor(data=a, requires_grad=False) for n, a in feeds.items()}


def _run(rep: sonnx.SingaRep, feeds: dict[str, np.ndarray]):
    xs = _tensors(feeds)
    return list(xs.values()), rep.run(xs)


def _fine_tune(rep: sonnx.SingaRep, family: Family, steps: int = 3) -> None:
    sgd = opt.SGD(lr=0.05)
    autograd.training = True
    for step in range(steps):
        outs = rep.run(_tensors(family.make(2 + step, 0)))
        loss = autograd.reduce_mean(autograd.mul(outs[0], outs[0]), keepdims=0)
        sgd(loss)
    autograd.training = False


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    """onnxruntime without its extended rewrites: those turn DequantizeLinear -> MatMul into a
    dynamically quantized MatMul, which differs from the model's float math by ~1 %."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _all_initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Initializers of the graph and of every subgraph, by name."""
    found: dict[str, np.ndarray] = {}
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        found.update((t.name, numpy_helper.to_array(t)) for t in graph.initializer)
        for node in graph.node:
            for attr in node.attribute:
                graphs.extend([attr.g] if attr.HasField("g") else attr.graphs)
    return found


@pytest.mark.parametrize("name", list(FAMILIES))
def test_export_without_training_is_the_original_graph(name: str) -> None:
    family = FAMILIES[name]()
    original = family.model
    rep = sonnx.prepare(original)
    xs, ys = _run(rep, family.make(2, 0))
    exported = sonnx.to_onnx(xs, ys)
    assert list(exported.graph.node) == list(original.graph.node)
    assert list(exported.graph.input) == [
        v for v in original.graph.input if v.name not in _initializers(original)
    ]
    assert list(exported.graph.output) == list(original.graph.output)
    opsets = {(o.domain, o.version) for o in original.opset_import}
    assert {(o.domain, o.version) for o in exported.opset_import} == opsets
    assert list(exported.functions) == list(original.functions)
    assert list(exported.metadata_props) == list(original.metadata_props)
    assert exported.doc_string == original.doc_string
    assert exported.graph.doc_string == original.graph.doc_string
    before, after = _initializers(original), _initializers(exported)
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert after[key].dtype == value.dtype, key
        np.testing.assert_array_equal(after[key], value, err_msg=key)
    onnx.checker.check_model(exported, full_check=True)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_fine_tuned_export_runs_at_other_shapes_branches_and_trip_counts(name: str) -> None:
    family = FAMILIES[name]()
    rep = sonnx.prepare(family.model)
    _fine_tune(rep, family)
    xs, ys = _run(rep, family.make(2, 0))
    exported = sonnx.to_onnx(xs, ys)
    onnx.checker.check_model(exported, full_check=True)
    before, after = _all_initializers(family.model), _all_initializers(exported)
    # BatchNorm statistics that shared a weight's initializer get one of their own once trained
    assert {n for n in after.keys() - before.keys() if not n.endswith(STATISTICS_SUFFIX)} == set()
    assert before.keys() <= after.keys()
    assert any(not np.array_equal(after[n], v) for n, v in before.items() if v.dtype == F)
    session = ort_session(exported)
    for batch, variant in [(1, OTHER_VARIANT), (3, OTHER_VARIANT), (5, 2), (4, 0)]:
        feeds = family.make(batch, variant)
        ours = [to_numpy(y) for y in rep.run(feeds)]
        theirs = session.run(None, feeds)
        for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5, err_msg=f"output {k}")


def test_int8_weights_stay_int8_with_their_dequantize() -> None:
    family = FAMILIES["int8"]()
    rep = sonnx.prepare(family.model)
    assert set(rep.tensor_map) == {"bias"}  # int8 weights, scale and zero point are constants
    _fine_tune(rep, family)
    exported = sonnx.to_onnx(*_run(rep, family.make(2, 0)))
    types = {t.name: t.data_type for t in exported.graph.initializer}
    assert types["W_q"] == onnx.TensorProto.INT8
    assert exported.graph.node[0].op_type == "DequantizeLinear"


@pytest.mark.parametrize("cut", [{"last_layers": -2}, {"output": "cut"}])
def test_cut_and_appended_layers_export_with_the_kept_inputs(cut) -> None:
    family = FAMILIES["cnn"]()
    rep = sonnx.prepare(family.model)
    if "output" in cut:
        cut = {"output": next(n.output[0] for n in family.model.graph.node if n.op_type == "Relu")}
    head = layer.Linear(4)
    sgd = opt.SGD(lr=0.05)

    def forward(x: Tensor) -> Tensor:
        features = rep.run([x], **cut)[0]
        if features.ndim() == 4:
            features = autograd.reduce_mean(features, [2, 3], keepdims=0)
        return head(autograd.relu(features))

    autograd.training = True
    for step in range(3):
        x = Tensor(data=family.make(2 + step, 0)["x"], requires_grad=False)
        sgd(autograd.reduce_mean(autograd.mul(forward(x), forward(x)), keepdims=0))
    autograd.training = False
    x = Tensor(data=family.make(2, 0)["x"], requires_grad=False)
    exported = sonnx.to_onnx([x], [forward(x)])
    onnx.checker.check_model(exported, full_check=True)
    assert list(exported.graph.input) == list(family.model.graph.input)
    out_dims = exported.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in out_dims] == ["batch", 4]  # the joined head's
    session = ort_session(exported)
    for batch in (1, 3, 6):
        feeds = family.make(batch, 1)
        ours = to_numpy(forward(Tensor(data=feeds["x"], requires_grad=False)))
        np.testing.assert_allclose(session.run(None, feeds)[0], ours, rtol=1e-5, atol=1e-6)


def test_seed_retraining_idiom_on_a_transformer_trains_like_sonnx_model() -> None:
    family = FAMILIES["bert"]()
    rep = sonnx.prepare(family.model)
    for t in rep.tensor_map.values():  # the SINGA docs' Infer class
        t.requires_grad = True
        t.stores_grad = True
    constants = [n for n in rep.constants if n not in rep.tensor_map]
    assert constants and not any(rep.constants[n].is_param for n in constants)
    sgd = opt.SGD(lr=1e-3)
    autograd.training = True
    labels = np.array([0, 1, 1], np.int32)
    losses = []
    for _ in range(3):
        (logits,) = rep.run(family.make(3, 0))
        loss = autograd.softmax_cross_entropy(logits, Tensor(data=labels, requires_grad=False))
        sgd(loss)
        losses.append(float(to_numpy(loss).reshape(())))
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_names_and_dynamic_axes_of_a_sonnx_built_model() -> None:
    w = Tensor(data=np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32))
    w.stores_grad = True
    x = Tensor(data=np.ones((2, 5, 4), np.float32), requires_grad=False)
    y = autograd.softmax(autograd.matmul(x, w), -1)
    axes = {"tokens": {0: "batch", 1: "seq"}, "probs": {0: "batch", 1: "seq"}}
    model = sonnx.to_onnx(
        [x], [y], input_names=["tokens"], output_names=["probs"], dynamic_axes=axes
    )
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert model.graph.input[0].name == "tokens" and dims == ["batch", "seq", 4]
    out_dims = model.graph.output[0].type.tensor_type.shape.dim
    assert model.graph.output[0].name == "probs"
    assert [d.dim_param or d.dim_value for d in out_dims] == ["batch", "seq", 3]
    session = ort_session(model)
    feed = np.random.default_rng(1).standard_normal((3, 7, 4)).astype(np.float32)
    expected = to_numpy(autograd.softmax(autograd.matmul(Tensor(data=feed), w), -1))
    np.testing.assert_allclose(session.run(None, {"tokens": feed})[0], expected, rtol=1e-5)
    with pytest.raises(sonnx.errors.ExportError, match="dynamic_axes names 'x'"):
        sonnx.to_onnx([x], [y], input_names=["tokens"], dynamic_axes={"x": [0]})
    with pytest.raises(sonnx.errors.ExportError, match="axes are in"):
        sonnx.to_onnx([x], [y], input_names=["tokens"], dynamic_axes={"tokens": [3]})


def test_prelu_after_a_computed_input_exports() -> None:
    # PRelu's export read its input's values, which a recorded computed input no longer keeps.
    import torch

    from sonnx.testing import torch_models as tm

    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.PReLU(8)
    )
    model = tm.export(net, (torch.randn(2, 3, 9, 9),), 13, ["x"], keep_batchnorm=True)
    rep = sonnx.prepare(model)
    x = Tensor(data=np.random.default_rng(0).standard_normal((2, 3, 9, 9)).astype(np.float32))
    (y,) = rep.run([x])
    w = Tensor(data=np.full((8, 1, 1), 0.1, np.float32))
    w.stores_grad = True
    z = autograd.prelu(autograd.relu(y), w)  # a sonnx PRelu reading a large computed input
    exported = sonnx.to_onnx([x], [z])
    got = ort_session(exported).run(None, {"x": to_numpy(x)})[0]
    np.testing.assert_allclose(got, to_numpy(z), rtol=1e-5, atol=1e-6)


def test_shape_computed_from_the_input_exports_as_graph_ops() -> None:
    w = Tensor(data=np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32))
    w.stores_grad = True

    def forward(x: Tensor) -> Tensor:
        y = autograd.matmul(x, w)
        return y.reshape((y.shape[0], y.shape[1] * y.shape[2]))  # [batch, seq * 3]

    x = Tensor(data=np.ones((2, 5, 4), np.float32), requires_grad=False)
    model = sonnx.to_onnx(
        [x], [forward(x)], input_names=["x"], dynamic_axes={"x": {0: "batch", 1: "seq"}}
    )
    assert {"Shape", "Gather", "Mul", "Concat"} <= {n.op_type for n in model.graph.node}
    session = ort_session(model)
    for batch, seq in [(1, 3), (4, 9)]:
        feed = np.random.default_rng(seq).standard_normal((batch, seq, 4)).astype(np.float32)
        expected = to_numpy(forward(Tensor(data=feed, requires_grad=False)))
        assert expected.shape == (batch, seq * 3)
        np.testing.assert_allclose(
            session.run(None, {"x": feed})[0], expected, rtol=1e-5, atol=1e-6
        )


class _Transfer(sonnx.SONNXModel):
    """SINGA's transfer-learning shape: the imported body cut before its head, a new head."""

    def __init__(self, model: onnx.ModelProto) -> None:
        super().__init__(model)
        self.head = layer.Linear(3)

    def forward(self, x: Tensor) -> Tensor:
        (features,) = super().forward(x, last_layers=-2)  # pooled, before the Gemm head
        return self.head(features)


def test_sonnx_model_with_a_new_head_exports_with_model_to_onnx(tmp_path) -> None:
    family = FAMILIES["cnn"]()
    net = _Transfer(family.model)
    net.set_optimizer(opt.SGD(lr=0.05))
    net.freeze("features.0")
    x = Tensor(data=family.make(2, 0)["x"], requires_grad=False)
    labels = Tensor(data=np.array([1, 2], np.int32), requires_grad=False)
    net.train()
    for _ in range(3):
        net.train_one_batch(x, labels)
    net.eval()
    exported = net.to_onnx(tmp_path / "transfer.onnx", [x], output_names=["scores"])
    assert exported.graph.input[0] == family.model.graph.input[0]
    assert exported.graph.output[0].name == "scores"
    session = ort_session(onnx.load(tmp_path / "transfer.onnx"))
    for batch in (1, 4):
        feeds = family.make(batch, 1)
        ours = to_numpy(net.forward(Tensor(data=feeds["x"], requires_grad=False)))
        np.testing.assert_allclose(session.run(None, feeds)[0], ours, rtol=1e-5, atol=1e-6)


def test_two_runs_of_one_model_in_one_export_keep_apart() -> None:
    family = FAMILIES["int8"]()
    rep = sonnx.prepare(family.model)
    a = Tensor(data=family.make(2, 0)["x"], requires_grad=False)
    b = Tensor(data=family.make(2, 1)["x"], requires_grad=False)
    total = autograd.add(rep.run([a])[0], rep.run([b])[0])
    exported = sonnx.to_onnx([a, b], [total], input_names=["a", "b"])
    # Each run writes the model's nodes once (the second under renamed tensors), joined to
    # the graph inputs a, b and to the one shared trainable bias by Identity nodes.
    ops = sorted(n.op_type for n in exported.graph.node)
    original = sorted(n.op_type for n in family.model.graph.node)
    assert ops == sorted([*original, *original, "Add", "Identity", "Identity", "Identity"])
    got = ort_session(exported).run(None, {"a": to_numpy(a), "b": to_numpy(b)})[0]
    np.testing.assert_allclose(got, to_numpy(total), rtol=1e-5, atol=1e-6)


def test_an_ir3_model_with_weights_among_its_inputs_exports_valid() -> None:
    from onnx import TensorProto, helper

    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="matmul")],
        "old",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        [numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)], ir_version=3)
    rep = sonnx.prepare(model)
    assert rep.inputs == ["x"]
    x = Tensor(data=np.ones((2, 4), np.float32), requires_grad=False)
    exported = sonnx.to_onnx([x], rep.run([x]))
    onnx.checker.check_model(exported, full_check=True)
    feed = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(ort_session(exported).run(None, {"x": feed})[0], feed @ w, rtol=1e-5)
