"""Layers: lazy shapes, forward against torch, gradients, state discovery, modes, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import sonnx.autograd as autograd
from sonnx import layer
from sonnx.errors import BadInputError, WrongTypeError
from sonnx.tensor import Tensor
from tests.helpers import check_grad

rng = np.random.default_rng(0)


def t(array: np.ndarray) -> Tensor:
    return Tensor(data=np.asarray(array), requires_grad=False)


def randn(*shape: int, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def grads_of(out: Tensor) -> dict[int, torch.Tensor]:
    return {id(p): g.data for p, g in autograd.backward(autograd.reduce_sum(out * out))}


# ---- Linear -----------------------------------------------------------------------------


def test_linear_lazy_shapes_forward_and_param_grads():
    autograd.training = True
    fc = layer.Linear(4)
    x = randn(3, 5)
    y = fc(t(x))
    assert fc.W.shape == (5, 4) and fc.b.shape == (4,) and y.shape == (3, 4)
    W = fc.W.data.detach().clone().requires_grad_()
    b = fc.b.data.detach().clone().requires_grad_()
    ref = torch.from_numpy(x) @ W + b
    torch.testing.assert_close(y.data, ref)
    grads = grads_of(y)
    (ref * ref).sum().backward()
    torch.testing.assert_close(grads[id(fc.W)], W.grad)
    torch.testing.assert_close(grads[id(fc.b)], b.grad)


def test_linear_in_out_form_higher_rank_and_no_bias():
    fc = layer.Linear(5, 2, bias=False)
    x = randn(2, 3, 5)
    y = fc(t(x))
    assert y.shape == (2, 3, 2) and not hasattr(fc, "b")
    torch.testing.assert_close(y.data, torch.from_numpy(x) @ fc.W.data)
    with pytest.raises(BadInputError, match=r"Linear: input must have 5 features .*\(2, 4\)"):
        layer.Linear(5, 2)(t(randn(2, 4)))


def test_linear_input_gradient():
    fc = layer.Linear(3)
    fc(t(randn(2, 4, dtype=np.float64)))
    check_grad(lambda x: fc(x), [rng.standard_normal((2, 4))])


def test_linear_bad_inputs():
    with pytest.raises(
        BadInputError, match=r"Linear: input must be at least 2-D .*received shape \(5,\)"
    ):
        layer.Linear(3)(t(randn(5)))
    fc = layer.Linear(3)
    fc(t(randn(2, 4)))
    with pytest.raises(BadInputError, match=r"dtype must match the parameters. float32"):
        fc(t(randn(2, 4, dtype=np.float64)))
    with pytest.raises(BadInputError, match="out_features must be a positive integer"):
        layer.Linear(0)
    with pytest.raises(BadInputError, match="Linear"):
        layer.Linear(1, 2, 3)


# ---- convolution and pooling --------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "fn", "shape"),
    [
        (layer.Conv1d, F.conv1d, (2, 4, 9)),
        (layer.Conv2d, F.conv2d, (2, 4, 9, 8)),
        (layer.Conv3d, F.conv3d, (2, 4, 5, 6, 7)),
    ],
)
def test_conv_matches_torch(cls, fn, shape):
    conv = cls(6, 3, stride=2, padding=1, dilation=1, group=2)
    x = randn(*shape)
    y = conv(t(x))
    assert conv.W.shape == (6, 2) + (3,) * (len(shape) - 2)
    ref = fn(torch.from_numpy(x), conv.W.data, conv.b.data, stride=2, padding=1, groups=2)
    torch.testing.assert_close(y.data, ref, rtol=1e-5, atol=1e-5)


def test_conv2d_singa_in_channels_form_and_pad_modes():
    conv = layer.Conv2d(3, 8, 3, 1, 1)
    assert conv(t(randn(1, 3, 6, 6))).shape == (1, 8, 6, 6)
    with pytest.raises(BadInputError, match=r"Conv2d: input must have 3 channels .*\(1, 4, 6, 6\)"):
        layer.Conv2d(3, 8, 3)(t(randn(1, 4, 6, 6)))
    same = layer.Conv2d(4, 3, stride=2, pad_mode="SAME_UPPER")
    assert same(t(randn(1, 2, 7, 7))).shape == (1, 4, 4, 4)
    valid = layer.Conv2d(4, 3, pad_mode="VALID", bias=False)
    assert valid(t(randn(1, 2, 7, 7))).shape == (1, 4, 5, 5)


def test_conv2d_input_gradient():
    conv = layer.Conv2d(2, 2, padding=1)
    conv(t(randn(1, 1, 3, 3, dtype=np.float64)))
    check_grad(lambda x: conv(x), [rng.standard_normal((1, 1, 3, 3))])


def test_conv_bad_inputs():
    with pytest.raises(
        BadInputError, match=r"Conv2d: input must be 4-D \(N, C, H, W\), received shape \(3, 8, 8\)"
    ):
        layer.Conv2d(4, 3)(t(randn(3, 8, 8)))
    with pytest.raises(BadInputError, match="channels \\(3\\) must be divisible by group"):
        layer.Conv2d(4, 3, group=2)(t(randn(1, 3, 8, 8)))
    with pytest.raises(BadInputError, match="pad_mode must be one of"):
        layer.Conv2d(4, 3, pad_mode="SAME")
    with pytest.raises(BadInputError, match="kernel_size must be an int or 2 ints"):
        layer.Conv2d(4, (3, 3, 3))
    with pytest.raises(BadInputError, match="padding must be a non-negative int"):
        layer.Conv2d(4, 3, padding=-1)


@pytest.mark.parametrize(
    ("make", "ref", "shape"),
    [
        (lambda: layer.MaxPool2d(2), lambda x: F.max_pool2d(x, 2), (2, 3, 8, 8)),
        (
            lambda: layer.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
            lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
            (2, 3, 8, 8),
        ),
        (lambda: layer.MaxPool1d(3, 2), lambda x: F.max_pool1d(x, 3, 2), (2, 3, 9)),
        (
            lambda: layer.AvgPool2d(3, 2, padding=1),
            lambda x: F.avg_pool2d(x, 3, 2, 1),
            (2, 3, 8, 8),
        ),
        (lambda: layer.AvgPool1d(2), lambda x: F.avg_pool1d(x, 2), (2, 3, 9)),
        (lambda: layer.MaxPool3d(2), lambda x: F.max_pool3d(x, 2), (1, 2, 4, 4, 4)),
        (lambda: layer.AvgPool3d(2), lambda x: F.avg_pool3d(x, 2), (1, 2, 4, 4, 4)),
    ],
)
def test_pooling_matches_torch(make, ref, shape):
    x = randn(*shape)
    torch.testing.assert_close(make()(t(x)).data, ref(torch.from_numpy(x)))


def test_pooling_gradient_and_rank_error():
    pool = layer.AvgPool2d(2)
    check_grad(lambda x: pool(x), [rng.standard_normal((1, 1, 4, 4))])
    with pytest.raises(BadInputError, match=r"MaxPool1d: input must be 3-D \(N, C, L\)"):
        layer.MaxPool1d(2)(t(randn(2, 3, 4, 4)))


# ---- normalization ------------------------------------------------------------------------


def test_batchnorm2d_training_and_inference_match_torch():
    """Batch statistics as torch; the running variance follows ONNX (population variance)."""
    bn = layer.BatchNorm2d(momentum=0.8)
    ref = torch.nn.BatchNorm2d(3, momentum=0.2)
    x = randn(4, 3, 5, 5)
    autograd.training = True
    ref.train()
    running_var = torch.ones(3)
    for _ in range(3):
        y = bn(t(x))
        torch.testing.assert_close(y.data, ref(torch.from_numpy(x)), rtol=1e-5, atol=1e-5)
        batch_var = torch.from_numpy(x).var(dim=(0, 2, 3), unbiased=False)
        running_var = 0.8 * running_var + 0.2 * batch_var
    torch.testing.assert_close(bn.running_mean.data, ref.running_mean)
    torch.testing.assert_close(bn.running_var.data, running_var)
    autograd.training = False
    ref.eval()
    ref.running_var.copy_(running_var)
    torch.testing.assert_close(bn(t(x)).data, ref(torch.from_numpy(x)), rtol=1e-5, atol=1e-5)
    assert set(bn.get_params()) == {"scale", "bias"}
    assert set(bn.get_states()) == {"scale", "bias", "running_mean", "running_var"}


def test_batchnorm1d_ranks_and_errors():
    bn = layer.BatchNorm1d()
    autograd.training = True
    y = bn(t(randn(8, 4)))
    assert y.shape == (8, 4)
    torch.testing.assert_close(y.data.mean(0), torch.zeros(4), atol=1e-5, rtol=0)
    assert layer.BatchNorm1d(4)(t(randn(8, 4, 3))).shape == (8, 4, 3)
    with pytest.raises(
        BadInputError,
        match=r"BatchNorm2d: input must be 4-D \(N, C, H, W\), received shape \(8, 4\)",
    ):
        layer.BatchNorm2d()(t(randn(8, 4)))
    with pytest.raises(BadInputError, match="input must have 5 channels"):
        layer.BatchNorm1d(5)(t(randn(8, 4)))
    with pytest.raises(BadInputError, match=r"momentum must be in \[0, 1\]"):
        layer.BatchNorm2d(momentum=1.5)


def test_layernorm_matches_torch_and_gradient():
    ln = layer.LayerNorm(axis=-2)
    x = randn(2, 3, 4)
    y = ln(t(x))
    assert ln.scale.shape == (3, 4)
    torch.testing.assert_close(
        y.data, F.layer_norm(torch.from_numpy(x), (3, 4)), rtol=1e-5, atol=1e-5
    )
    ln64 = layer.LayerNorm()
    ln64(t(randn(2, 3, dtype=np.float64)))
    check_grad(lambda v: ln64(v), [rng.standard_normal((2, 3))])
    with pytest.raises(BadInputError, match="LayerNorm: input must be at least 2-D"):
        ln(t(randn(4)))


def test_dropout_modes():
    drop = layer.Dropout(0.5)
    x = np.ones((200, 50), dtype=np.float32)
    np.testing.assert_array_equal(drop(t(x)).data.numpy(), x)
    autograd.training = True
    y = drop(t(x)).data.numpy()
    assert set(np.unique(y)) <= {0.0, 2.0}
    assert 0.4 < (y == 0).mean() < 0.6
    with pytest.raises(BadInputError, match=r"Dropout: ratio must be in \[0, 1\)"):
        layer.Dropout(1.0)


# ---- embedding, flatten, activations, losses ------------------------------------------------


def test_embedding():
    emb = layer.Embedding(10, 3)
    idx = np.array([[1, 2], [9, 0]], dtype=np.int64)
    y = emb(t(idx))
    assert y.shape == (2, 2, 3) and emb.W.dtype == torch.float32
    torch.testing.assert_close(y.data, emb.W.data[torch.from_numpy(idx)])
    autograd.training = True
    grads = grads_of(emb(t(idx)))
    assert torch.count_nonzero(grads[id(emb.W)].abs().sum(1)) == 4
    with pytest.raises(BadInputError, match="Embedding: input must hold integer indices"):
        emb(t(randn(2)))


def test_flatten():
    assert layer.Flatten()(t(randn(2, 3, 4))).shape == (2, 12)
    assert layer.Flatten(2)(t(randn(2, 3, 4))).shape == (6, 4)


@pytest.mark.parametrize(
    ("make", "ref"),
    [
        (layer.ReLU, F.relu),
        (layer.Sigmoid, torch.sigmoid),
        (layer.Tanh, torch.tanh),
        (layer.SoftMax, lambda x: F.softmax(x, 1)),
        (layer.LogSoftMax, lambda x: F.log_softmax(x, 1)),
        (layer.GELU, F.gelu),
        (lambda: layer.GELU("tanh"), lambda x: F.gelu(x, approximate="tanh")),
        (lambda: layer.LeakyReLU(0.2), lambda x: F.leaky_relu(x, 0.2)),
        (layer.ELU, F.elu),
        (layer.SeLU, F.selu),
        (layer.SoftPlus, F.softplus),
        (layer.SoftSign, F.softsign),
        (layer.HardSigmoid, lambda x: torch.clamp(0.2 * x + 0.5, 0, 1)),
    ],
)
def test_activations_match_torch_with_gradients(make, ref):
    act = make()
    x = rng.standard_normal((3, 4))
    torch.testing.assert_close(act(t(x)).data, ref(torch.from_numpy(x)))
    check_grad(lambda v: act(v), [x + np.sign(x) * 0.05])


def test_losses():
    x, labels = randn(4, 5, dtype=np.float64), np.array([0, 3, 1, 4])
    loss = layer.SoftMaxCrossEntropy()(t(x), t(labels))
    expected = F.cross_entropy(torch.from_numpy(x), torch.from_numpy(labels))
    torch.testing.assert_close(loss.data.reshape(()), expected)
    target = randn(4, 5, dtype=np.float64)
    mse = layer.MeanSquareError()(t(x), t(target))
    torch.testing.assert_close(mse.data.reshape(()), torch.tensor(((x - target) ** 2).sum() / 8))
    probs = 1 / (1 + np.exp(-x))
    onehot = np.eye(5)[labels]
    ce = layer.CrossEntropy()(t(probs), t(onehot))
    torch.testing.assert_close(
        ce.data.reshape(()), torch.tensor(-(onehot * np.log(probs)).sum() / 4)
    )
    bce = layer.BinaryCrossEntropy()(t(probs), t(onehot))
    expected_bce = F.binary_cross_entropy(torch.from_numpy(probs), torch.from_numpy(onehot)) * 5
    torch.testing.assert_close(bce.data.reshape(()), expected_bce)


# ---- discovery, params, modes ---------------------------------------------------------------


class Block(layer.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self._cache = layer.Linear(2)  # private: not discovered

    def forward(self, x: Tensor) -> Tensor:
        return autograd.relu(self.bn(self.conv(x)))


class Net(layer.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = [Block(), Block()]
        self.head = layer.Sequential(layer.Flatten(), layer.Linear(3))

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_discovery_names_params_and_states():
    net = Net()
    assert net.get_params() == {}
    y = net(t(randn(2, 1, 4, 4)))
    assert y.shape == (2, 3)
    params = net.get_params()
    assert list(params) == [
        "blocks.0.conv.W",
        "blocks.0.conv.b",
        "blocks.0.bn.scale",
        "blocks.0.bn.bias",
        "blocks.1.conv.W",
        "blocks.1.conv.b",
        "blocks.1.bn.scale",
        "blocks.1.bn.bias",
        "head.1.W",
        "head.1.b",
    ]
    states = net.get_states()
    assert "blocks.1.bn.running_var" in states and "blocks.1.bn.running_var" not in params
    assert params["head.1.W"].name == "head.1.W"
    assert len(list(net.layers())) == 10


def test_set_params_and_states_round_trip():
    net, other = Net(), Net()
    x = t(randn(2, 1, 4, 4))
    net(x)
    other(x)
    other.set_states({k: v.data.clone() for k, v in net.get_states().items()})
    torch.testing.assert_close(other(x).data, net(x).data, rtol=0, atol=0)
    other.set_params({"head.1.b": np.full(3, 7.0, dtype=np.float32)})
    assert torch.all(other.head[1].b.data == 7.0)
    with pytest.raises(BadInputError, match=r"unknown name\(s\) \['nope'\]"):
        other.set_params({"nope": np.zeros(3)})
    with pytest.raises(BadInputError, match=r"head.1.b must have shape \(3,\), received \(4,\)"):
        other.set_params({"head.1.b": np.zeros(4, dtype=np.float32)})
    with pytest.raises(BadInputError, match="run one forward pass first"):
        Net().set_params({"head.1.b": np.zeros(3)})
    with pytest.raises(BadInputError, match=r"head\.1\.b must be a Tensor"):
        other.set_params({"head.1.b": [0.0, 0.0, 0.0]})


def test_train_eval_flags():
    net = Net()
    net.train()
    assert autograd.training is True and net.blocks[1].bn.training is True
    net.eval()
    assert autograd.training is False and net.head[0].training is False


def test_sequential():
    seq = layer.Sequential(layer.Linear(4), layer.ReLU(), layer.Linear(2))
    assert len(seq) == 3
    seq.append(layer.SoftMax())
    y = seq(t(randn(5, 3)))
    torch.testing.assert_close(y.data.sum(1), torch.ones(5))
    assert list(seq.get_params()) == ["0.W", "0.b", "2.W", "2.b"]
    with pytest.raises(BadInputError, match="Sequential: argument 1 must be a Layer"):
        layer.Sequential(layer.ReLU(), F.relu)
    with pytest.raises(
        BadInputError, match="Linear: input must be a sonnx Tensor, received ndarray"
    ):
        layer.Linear(2)(np.zeros((2, 2)))


def test_sequential_append_takes_only_layers() -> None:
    seq = layer.Sequential(layer.ReLU())
    message = r"Sequential\.append must be a Layer, received function"
    with pytest.raises(WrongTypeError, match=message):
        seq.append(F.relu)
    with pytest.raises(TypeError, match="received Tensor"):
        seq.append(t(randn(2, 2)))
    assert len(seq) == 1


@pytest.mark.parametrize("approximate", ["exact", "erf", None, "Tanh"])
def test_gelu_takes_only_onnx_approximations(approximate) -> None:
    with pytest.raises(BadInputError, match=rf"GELU: approximate must be one of .*{approximate!r}"):
        layer.GELU(approximate=approximate)
