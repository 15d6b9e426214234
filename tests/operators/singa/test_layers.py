"""SINGA's older layer objects: parameters, forward against torch, parameter I/O, and the seed
CNN running forward and backward with gradients equal to torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import sonnx.autograd as autograd
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

rng = np.random.default_rng(0)


def _t(a: np.ndarray) -> Tensor:
    return Tensor(data=a, requires_grad=False)


def test_conv2d_layer_parameters_and_forward():
    layer = autograd.Conv2d(4, 6, 3, stride=2, padding=1, group=2)
    params = layer.get_params()
    assert set(params) == {"W", "b"}
    assert params["W"].shape == (6, 2, 3, 3) and params["b"].shape == (6,)
    assert all(p.is_param for p in params.values())
    assert not params["b"].data.any()
    x = rng.standard_normal((2, 4, 7, 7)).astype(np.float32)
    expected = F.conv2d(torch.from_numpy(x), params["W"].data, params["b"].data, 2, 1, 1, 2)
    np.testing.assert_allclose(layer(_t(x)).numpy(), expected.detach().numpy(), rtol=1e-5)


def test_weight_initialization_follows_singa():
    layer = autograd.Conv2d(64, 64, 3)
    expected = np.sqrt(2.0 / (64 * 9 + 64))
    assert abs(float(layer.W.numpy().std()) - expected) < 0.05 * expected
    linear = autograd.Linear(400, 600)
    assert abs(float(linear.W.numpy().std()) - np.sqrt(2.0 / 1000)) < 0.05 * np.sqrt(2.0 / 1000)


def test_linear_is_one_gemm_for_2d_inputs_and_matmul_add_otherwise():
    layer = autograd.Linear(5, 3)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = layer(_t(x))
    assert y.creator.op_type == "Gemm"
    expected = x @ layer.W.numpy() + layer.b.numpy()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-6)
    x3 = rng.standard_normal((2, 4, 5)).astype(np.float32)
    y3 = layer(_t(x3))
    assert y3.creator.op_type == "Add"
    assert y3.creator.inputs[0].creator.op_type == "MatMul"
    np.testing.assert_allclose(y3.numpy(), x3 @ layer.W.numpy() + layer.b.numpy(), rtol=1e-5)
    no_bias = autograd.Linear(5, 3, bias=False)
    assert set(no_bias.get_params()) == {"W"}
    assert no_bias(_t(x)).creator.op_type == "Gemm"


def test_set_params_copies_values_and_checks():
    layer = autograd.Linear(2, 3)
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    layer.set_params({"W": w, "b": _t(np.ones(3, np.float32))})
    np.testing.assert_array_equal(layer.W.numpy(), w)
    np.testing.assert_array_equal(layer.b.numpy(), np.ones(3))
    with pytest.raises(BadInputError, match="unknown parameter 'V'"):
        layer.set_params({"V": w})
    with pytest.raises(BadInputError, match="copy_data"):
        layer.set_params({"W": np.zeros((3, 2), np.float32)})


def test_pool_layers_match_torch():
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    tx = torch.from_numpy(x)
    np.testing.assert_array_equal(autograd.MaxPool2d(2)(_t(x)).numpy(), F.max_pool2d(tx, 2).numpy())
    np.testing.assert_allclose(
        autograd.AvgPool2d(3, 2, 1)(_t(x)).numpy(), F.avg_pool2d(tx, 3, 2, 1).numpy(), rtol=1e-5
    )
    assert autograd.MaxPool2d(2).get_params() == {}


def test_batchnorm2d_training_and_inference():
    layer = autograd.BatchNorm2d(3, momentum=0.9)
    assert set(layer.get_params()) == {"scale", "bias"}
    assert set(layer.get_states()) == {"scale", "bias", "running_mean", "running_var"}
    x = (rng.standard_normal((4, 3, 5, 5)) * 2 + 1).astype(np.float32)
    autograd.training = True
    y = layer(_t(x))
    batch_mean = x.mean(axis=(0, 2, 3))
    np.testing.assert_allclose(layer.running_mean.numpy(), 0.1 * batch_mean, rtol=1e-4)
    np.testing.assert_allclose(y.numpy().mean(axis=(0, 2, 3)), 0, atol=1e-5)
    autograd.training = False
    layer.set_states({"running_mean": np.zeros(3), "running_var": np.full(3, 4.0)})
    np.testing.assert_allclose(layer(_t(x)).numpy(), x / np.sqrt(4 + 1e-5), rtol=1e-5)


def test_layer_argument_errors():
    with pytest.raises(BadInputError, match="Conv2d: group=2 must divide in_channels=3"):
        autograd.Conv2d(3, 4, 3, group=2)
    with pytest.raises(BadInputError, match="Linear: in_features must be a positive int"):
        autograd.Linear(0, 3)
    with pytest.raises(BadInputError, match="Linear: input x must end in 5 features"):
        autograd.Linear(5, 3)(_t(np.zeros((2, 4), np.float32)))


class SeedCNN:
    """The seed model: conv 1->20 k5, relu, maxpool 2, conv 20->50 k5, relu, maxpool 2,
    flatten, linear 800->500, relu, linear 500->10."""

    def __init__(self) -> None:
        self.conv1 = autograd.Conv2d(1, 20, 5)
        self.conv2 = autograd.Conv2d(20, 50, 5)
        self.pool = autograd.MaxPool2d(2)
        self.fc1 = autograd.Linear(800, 500)
        self.fc2 = autograd.Linear(500, 10)

    def __call__(self, x: Tensor) -> Tensor:
        y = self.pool(autograd.relu(self.conv1(x)))
        y = self.pool(autograd.relu(self.conv2(y)))
        y = autograd.flatten(y, 1)
        return self.fc2(autograd.relu(self.fc1(y)))

    def params(self) -> dict[str, Tensor]:
        layers = {"conv1": self.conv1, "conv2": self.conv2, "fc1": self.fc1, "fc2": self.fc2}
        return {f"{k}.{n}": p for k, layer in layers.items() for n, p in layer.get_params().items()}


def test_seed_cnn_forward_and_backward_match_torch():
    model = SeedCNN()
    x = rng.standard_normal((3, 1, 28, 28)).astype(np.float32)
    dy = rng.standard_normal((3, 10)).astype(np.float32)
    autograd.training = True
    y = model(_t(x))
    assert y.shape == (3, 10)
    grads = {id(p): g for p, g in autograd.backward(y, _t(dy))}
    params = model.params()
    assert len(grads) == len(params) == 8

    t = {k: p.data.detach().clone().requires_grad_(True) for k, p in params.items()}
    h = F.max_pool2d(F.relu(F.conv2d(torch.from_numpy(x), t["conv1.W"], t["conv1.b"])), 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, t["conv2.W"], t["conv2.b"])), 2).flatten(1)
    h = F.relu(h @ t["fc1.W"] + t["fc1.b"]) @ t["fc2.W"] + t["fc2.b"]
    np.testing.assert_allclose(y.numpy(), h.detach().numpy(), rtol=1e-4, atol=1e-5)
    h.backward(torch.from_numpy(dy))
    for name, p in params.items():
        np.testing.assert_allclose(
            grads[id(p)].numpy(), t[name].grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name
        )


@pytest.mark.parametrize("opset", [11, None])
def test_seed_cnn_exports_and_runs_in_onnxruntime(opset):
    import onnxruntime as ort

    from sonnx.onnx.exporter import to_onnx

    model = SeedCNN()
    x = _t(rng.standard_normal((2, 1, 28, 28)).astype(np.float32))
    y = model(x)
    session = ort.InferenceSession(to_onnx([x], [y], opset=opset).SerializeToString())
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    np.testing.assert_allclose(got, y.numpy(), rtol=1e-4, atol=1e-5)
