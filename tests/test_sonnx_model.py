"""SONNXModel: training what you import, cutting it, extending it, exporting it again."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import helper

import sonnx
from sonnx import autograd, layer, opt, tensor
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor, to_numpy
from sonnx.testing import torch_models as tm
from sonnx.walkthrough import CNN


@pytest.fixture(scope="module")
def cnn_onnx() -> onnx.ModelProto:
    """The seed CNN (untrained) exported by sonnx."""
    torch.manual_seed(0)
    model = CNN()
    x = Tensor(data=np.zeros((2, 1, 28, 28), np.float32), requires_grad=False, name="x")
    return sonnx.to_onnx([x], [model.forward(x)])


def _batches(n_steps: int, batch: int = 32, seed: int = 0):
    """A learnable toy task on 28x28 images: the class is the brightest of 10 image bands."""
    rng = np.random.default_rng(seed)
    for _ in range(n_steps):
        y = rng.integers(0, 10, batch)
        x = rng.random((batch, 1, 28, 28), np.float32) * 0.2
        for i, c in enumerate(y):
            x[i, 0, 2 * c + 4 : 2 * c + 6, :] += 0.8
        yield Tensor(data=x, requires_grad=False), Tensor(data=y, requires_grad=False)


class MyModel(sonnx.SONNXModel):
    """The seed's SONNXModel subclass pattern."""

    def __init__(self, onnx_model):
        super().__init__(onnx_model)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, *x):
        y = super().forward(*x)
        return y[0]

    def train_one_batch(self, x, y, dist_option, spars):
        out = self.forward(x)
        loss = self.loss(out, y)
        if dist_option == "fp32":
            self.optimizer.backward_and_update(loss)
        return out, loss

    def set_optimizer(self, optimizer):
        self.optimizer = optimizer


def test_subclass_pattern_trains_with_compile_and_train_one_batch(cnn_onnx) -> None:
    model = MyModel(cnn_onnx)
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    tx = tensor.PlaceHolder((32, 1, 28, 28))
    model.compile([tx], is_train=True, use_graph=False, sequential=True)
    assert set(model.get_params()) == {
        i.name for i in cnn_onnx.graph.initializer if i.data_type == onnx.TensorProto.FLOAT
    }
    losses = [float(to_numpy(model(x, y, "fp32", None)[1])[0]) for x, y in _batches(30)]
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])


class Transfer(sonnx.SONNXModel):
    def __init__(self, onnx_model):
        super().__init__(onnx_model)
        self.linear = layer.Linear(10)

    def forward(self, *x):
        y = super().forward(*x, last_layers=-2)[0]  # drop the last Gemm: 500 features
        return self.linear(autograd.relu(y))


def test_transfer_learning_trains_only_unfrozen_parameters(cnn_onnx) -> None:
    model = Transfer(cnn_onnx)
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    model.compile([tensor.PlaceHolder((32, 1, 28, 28))], is_train=True)
    imported = {n: to_numpy(t).copy() for n, t in model.rep.params.items()}
    assert model.freeze("") == len(imported)
    losses = [float(to_numpy(model(x, y)[1])[0]) for x, y in _batches(30)]
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    for name, before in imported.items():
        np.testing.assert_array_equal(to_numpy(model.rep.constants[name]), before)
    assert "linear.W" in model.get_params()
    first = next(iter(imported))
    assert model.unfreeze(first) == 1
    with pytest.raises(BadInputError, match="no imported parameter"):
        model.freeze("no_such_prefix")


def test_after_a_cut_only_the_kept_graphs_weights_are_parameters_and_train(cnn_onnx) -> None:
    model = Transfer(cnn_onnx)  # last_layers=-2: the last Gemm and its weights are cut away
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9, weight_decay=0.01))
    model.compile([tensor.PlaceHolder((32, 1, 28, 28))], is_train=True)
    last_gemm = [n for n in cnn_onnx.graph.node if n.op_type == "Gemm"][-1]
    cut = set(last_gemm.input[1:])
    imported = {i.name for i in cnn_onnx.graph.initializer}
    assert cut < imported
    assert set(model.get_params()) == (imported - cut) | {"linear.W", "linear.b"}
    assert cut <= set(model.get_states())  # the checkpoint still holds the whole model
    before = {n: to_numpy(model.rep.constants[n]).copy() for n in imported}
    for x, y in _batches(2):
        model(x, y)
    for name in imported:
        changed = not np.array_equal(to_numpy(model.rep.constants[name]), before[name])
        assert changed == (name not in cut), name
    sonnx.SONNXModel.forward(model, next(_batches(1))[0])  # the whole graph again
    assert cut <= set(model.get_params())


def test_imported_batchnorm_follows_train_and_eval_mode() -> None:
    torch.manual_seed(0)
    net = tm.SmallCNN()
    for bn in (m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)):
        # distinct statistics (fresh ones are all equal, and torch's exporter shares them)
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
    proto = tm.export(net, (torch.randn(2, 3, 16, 16),), 13, ["x"], keep_batchnorm=True)
    model = sonnx.SONNXModel(proto)
    stats = [n.input[3] for n in proto.graph.node if n.op_type == "BatchNormalization"]
    assert stats and not set(stats) & set(model.get_params())
    assert set(stats) <= set(model.get_states())
    x = Tensor(data=np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))
    before = to_numpy(model.rep.constants[stats[0]]).copy()
    model.eval()
    first = to_numpy(model.forward(x)[0])
    np.testing.assert_array_equal(to_numpy(model.rep.constants[stats[0]]), before)
    model.train()
    model.forward(x)
    assert not np.array_equal(to_numpy(model.rep.constants[stats[0]]), before)
    model.eval()
    assert not np.allclose(to_numpy(model.forward(x)[0]), first)


def test_bert_style_encoder_fine_tunes_then_exports_for_onnxruntime() -> None:
    torch.manual_seed(0)
    ids, mask = tm.bert_inputs(2)
    proto = tm.export(tm.TinyBert(), (ids, mask), 17, ["input_ids", "attention_mask"])
    model = sonnx.SONNXModel(proto)
    sgd = opt.Adam(lr=3e-3)
    autograd.training = True
    losses = []
    for step in range(25):
        ids, mask = tm.bert_inputs(16, seed=step)
        labels = (ids[:, 0] < 50).to(torch.int64)
        logits = model.forward(ids.numpy(), mask.numpy())[0]
        loss = autograd.softmax_cross_entropy(logits, Tensor(data=labels, requires_grad=False))
        sgd(loss)
        losses.append(float(to_numpy(loss)[0]))
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    autograd.training = False
    ids, mask = tm.bert_inputs(3, seed=99)
    feeds = [
        Tensor(data=ids, requires_grad=False, name="input_ids"),
        Tensor(data=mask, requires_grad=False, name="attention_mask"),
    ]
    out = model.forward(*feeds)[0]
    exported = sonnx.to_onnx(feeds, [out], model_name="tiny_bert_finetuned")
    session = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    np.testing.assert_allclose(got, to_numpy(out), rtol=1e-4, atol=1e-5)


def test_save_states_then_load_in_a_new_process_is_bit_identical(cnn_onnx, tmp_path) -> None:
    model_path = tmp_path / "cnn.onnx"
    onnx.save(cnn_onnx, model_path)
    model = MyModel(cnn_onnx)
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    model.compile([tensor.PlaceHolder((32, 1, 28, 28))], is_train=True)
    for x, y in _batches(5):
        model(x, y, "fp32", None)
    model.save_states(tmp_path / "states.zip")
    probe = np.random.default_rng(1).random((4, 1, 28, 28), np.float32)
    np.save(tmp_path / "probe.npy", probe)
    model.eval()
    expected = to_numpy(model.forward(Tensor(data=probe)))
    script = textwrap.dedent(f"""
        import numpy as np, sonnx
        from sonnx.tensor import Tensor, to_numpy
        model = sonnx.SONNXModel(r"{model_path}")
        model.load_states(r"{tmp_path / "states.zip"}")
        model.eval()
        out = model.forward(Tensor(data=np.load(r"{tmp_path / "probe.npy"}")))[0]
        np.save(r"{tmp_path / "out.npy"}", to_numpy(out))
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


def test_graph_mode_compiles_an_imported_graph_with_shape_arithmetic() -> None:
    """SINGA's SONNXModel example compiles with use_graph=True: the BERT graph's shape
    arithmetic folds into the traced graph, and inference and training equal eager."""
    torch.manual_seed(0)
    ids, mask = tm.bert_inputs(2)
    proto = tm.export(tm.TinyBert(layers=1), (ids, mask), 13, ["input_ids", "attention_mask"])
    a = Tensor(data=ids, requires_grad=False)
    b = Tensor(data=mask, requires_grad=False)
    labels = Tensor(data=np.array([0, 1]), requires_grad=False)
    models = {}
    for use_graph in (False, True):
        model = sonnx.SONNXModel(proto)
        model.set_optimizer(opt.SGD(lr=0.1))
        model.compile([a, b], is_train=False, use_graph=use_graph, sequential=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no fallback to eager
            out = model(a, b)[0]
            model.train()
            autograd.training = True
            loss = autograd.softmax_cross_entropy(model.forward(a, b)[0], labels)
            model.optimizer(loss)
        models[use_graph] = (to_numpy(out), to_numpy(loss), model.get_params())
        model.eval()
    (out, loss, params), (g_out, g_loss, g_params) = models[False], models[True]
    np.testing.assert_allclose(g_out, out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g_loss, loss, rtol=1e-5)
    for name, p in params.items():
        np.testing.assert_allclose(to_numpy(g_params[name]), to_numpy(p), atol=1e-6, err_msg=name)


def test_graph_mode_on_a_value_dependent_graph_warns_and_runs_eagerly() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("NonZero", ["x"], ["where"]),
            helper.make_node("Shape", ["where"], ["count"]),
            helper.make_node("Reshape", ["where", "count"], ["y"]),
        ],
        "nonzero",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT64, None)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = Tensor(data=np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], np.float32))
    model = sonnx.SONNXModel(proto)
    model.compile([x], is_train=False, use_graph=True)
    with pytest.warns(RuntimeWarning, match="output shape depends on tensor values"):
        (y,) = model(x)
    np.testing.assert_array_equal(to_numpy(y), np.array([[0, 0, 1], [0, 2, 1]]))


def test_fresh_batchnorm_statistics_shared_with_weights_get_their_own_buffers() -> None:
    """torch's exporter stores a fresh BatchNorm's scale and running variance (both ones) once;
    training must update the statistic without touching the weight."""
    torch.manual_seed(0)
    proto = tm.export(tm.SmallCNN(), (torch.randn(2, 3, 16, 16),), 13, ["x"], keep_batchnorm=True)
    assert any(n.op_type == "Identity" for n in proto.graph.node)
    model = sonnx.SONNXModel(proto)
    weights = {n: to_numpy(t).copy() for n, t in model.get_params().items()}
    x = Tensor(data=np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))
    model.train()
    autograd.training = True
    loss = autograd.softmax_cross_entropy(
        model.forward(x)[0], Tensor(data=np.arange(4), requires_grad=False)
    )
    assert {p.name for p, _ in autograd.backward(loss)} == set(weights)
    for name, before in weights.items():
        np.testing.assert_array_equal(to_numpy(model.get_params()[name]), before, err_msg=name)
