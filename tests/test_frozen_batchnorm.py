"""A frozen backbone runs in inference mode (issue 47, item 3): ``SONNXModel.freeze`` stops
the gradients of an imported BatchNormalization's scale and bias, and from then on the node
normalises with its running statistics and leaves them as they are, in training too, as a
torch backbone after ``.eval()``. ``unfreeze`` gives it back its batch statistics.

Stand-in: torch's small CNN (Conv, BatchNormalization, ReLU, pooling, twice) exported with its
BatchNormalization nodes, its running statistics set away from their defaults.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

import sonnx
from sonnx import autograd, layer, opt, tensor
from sonnx.tensor import Tensor, to_numpy
from sonnx.testing import torch_models as tm

RNG = np.random.default_rng(0)
X = tensor.from_numpy(RNG.standard_normal((16, 3, 16, 16)).astype(np.float32) * 2 + 1)
Y = tensor.from_numpy(RNG.integers(0, 4, 16).astype(np.int32))
FEATURES = "/features/features.7/AveragePool_output_0"
STATISTICS = [f"features.{k}.running_{s}" for k in (1, 5) for s in ("mean", "var")]


@pytest.fixture(scope="module")
def backbone() -> onnx.ModelProto:
    torch.manual_seed(0)
    cnn = tm.SmallCNN()
    with torch.no_grad():
        for bn in (cnn.features[1], cnn.features[5]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    return tm.export(cnn, (X.data,), 17, ["image"], keep_batchnorm=True)


class Transfer(sonnx.SONNXModel):
    """The imported backbone up to its last pooling, then a new head for four classes."""

    def __init__(self, onnx_model: onnx.ModelProto) -> None:
        super().__init__(onnx_model)
        self.flatten = layer.Flatten()
        self.head = layer.Linear(4)

    def forward(self, x: Tensor) -> Tensor:
        (features,) = super().forward(x, output=FEATURES)
        return self.head(self.flatten(features))

    def train_one_batch(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def _transfer(backbone: onnx.ModelProto) -> Transfer:
    net = Transfer(backbone)
    net.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    net.compile([X], is_train=True)
    return net


def _features(net: Transfer) -> np.ndarray:
    """The backbone's features in inference mode (the model is in training mode)."""
    net.eval()
    try:
        return to_numpy(net.rep.run([X], output=FEATURES)[0]).copy()
    finally:
        net.train()


def _statistics(net: Transfer) -> dict[str, np.ndarray]:
    return {name: to_numpy(net.rep.constants[name]).copy() for name in STATISTICS}


def test_a_frozen_backbone_keeps_its_features_across_a_training_step(backbone) -> None:
    net = _transfer(backbone)
    assert net.freeze("features.") == 8  # two convolutions and two BatchNorms, weight and bias
    features, statistics = _features(net), _statistics(net)
    head = to_numpy(net.head.W).copy()
    for _ in range(2):
        net(X, Y)  # train_one_batch, in training mode
    np.testing.assert_array_equal(_features(net), features)
    for name, before in statistics.items():
        np.testing.assert_array_equal(to_numpy(net.rep.constants[name]), before, err_msg=name)
    assert not np.array_equal(to_numpy(net.head.W), head)  # the head did train

    # In training mode the frozen part computes what inference computes.
    assert autograd.training
    in_training = to_numpy(net.rep.run([X], output=FEATURES)[0])
    np.testing.assert_allclose(in_training, features, rtol=1e-5, atol=1e-6)


def test_unfrozen_batchnorm_follows_the_batch_again(backbone) -> None:
    net = _transfer(backbone)
    net.freeze("features.")
    net.unfreeze("features.")
    statistics = _statistics(net)
    net(X, Y)
    moved = [
        n
        for n, before in statistics.items()
        if not np.array_equal(before, to_numpy(net.rep.constants[n]))
    ]
    assert moved == STATISTICS


def test_a_batchnorm_with_only_its_scale_frozen_still_follows_the_batch(backbone) -> None:
    net = _transfer(backbone)
    net.freeze("features.1.weight")
    before = _statistics(net)["features.1.running_mean"]
    net(X, Y)
    assert not np.array_equal(to_numpy(net.rep.constants["features.1.running_mean"]), before)
