"""Model: compile, mode dispatch, training, graph mode, and loading states into the model (the
states file itself: test_model_states.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sonnx.autograd as autograd
from sonnx import layer, model, opt
from sonnx.errors import BadInputError, ExportError
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import PlaceHolder, Tensor

rng = np.random.default_rng(0)


class CNN(model.Model):
    def __init__(self) -> None:
        super().__init__()
        self.conv = layer.Conv2d(6, 3, padding=1)
        self.relu = layer.ReLU()
        self.pool = layer.MaxPool2d(2)
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(5)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.flatten(self.pool(self.relu(self.conv(x)))))


class BNNet(model.Model):
    """Batch norm and a custom train_one_batch, as SINGA examples write them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1, bias=False)
        self.bn = layer.BatchNorm2d()
        self.fc = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(autograd.flatten(autograd.relu(self.bn(self.conv(x)))))

    def train_one_batch(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def data(n: int = 16, classes: int = 5) -> tuple[Tensor, Tensor]:
    x = Tensor(data=rng.standard_normal((n, 1, 8, 8)).astype(np.float32), requires_grad=False)
    y = Tensor(data=rng.integers(0, classes, n).astype(np.int32), requires_grad=False)
    return x, y


def built(cls=CNN, optimizer=None, **compile_kw) -> model.Model:
    m = cls()
    m.set_optimizer(optimizer or opt.SGD(0.05, momentum=0.9))
    m.compile([PlaceHolder((16, 1, 8, 8))], **compile_kw)
    return m


def test_compile_initialises_names_and_sets_mode():
    m = built(is_train=False)
    assert list(m.get_params()) == ["conv.W", "conv.b", "fc.W", "fc.b"]
    assert m.fc.W.shape == (96, 5) and m.conv.W.name == "conv.W"
    assert m.training is False and autograd.training is False
    m.train()
    assert m.training and m.fc.training and autograd.training
    with pytest.raises(BadInputError, match="inputs must be a non-empty list of Tensors"):
        CNN().compile([])


def test_call_dispatches_by_mode_and_training_lowers_loss():
    m = built()
    x, y = data()
    out, first = m(x, y)
    assert out.shape == (16, 5)
    for _ in range(15):
        _, loss = m(x, y)
    assert loss.item() < 0.5 * first.item()
    m.eval()
    assert m(x).shape == (16, 5)
    assert m.optimizer.step_counter == 16


def test_set_optimizer_and_missing_optimizer():
    with pytest.raises(BadInputError, match=r"expected a sonnx\.opt Optimizer, received dict"):
        CNN().set_optimizer({"lr": 0.1})
    m = CNN()
    m.compile([PlaceHolder((2, 1, 8, 8))])
    with pytest.raises(BadInputError, match="no optimizer"):
        m(*data(2))


@pytest.mark.parametrize("cls", [CNN, BNNet])
def test_graph_mode_equals_eager(cls):
    """Graph mode gives the same losses, outputs and states as eager (backend without
    numeric rewrites, so the comparison is exact)."""
    x, y = data(16, 3)
    results = []
    for use_graph in (False, True):
        torch.manual_seed(1)
        m = cls()
        m.graph_backend = "aot_eager"
        m.set_optimizer(opt.SGD(0.05, momentum=0.9))
        m.compile([x], is_train=True, use_graph=use_graph)
        losses = [m(x, y)[1].item() for _ in range(3)]
        m.eval()
        results.append((losses, m(x).data, {k: v.data for k, v in m.get_states().items()}))
    (eager_losses, eager_out, eager_states), (graph_losses, graph_out, graph_states) = results
    assert graph_losses == eager_losses
    torch.testing.assert_close(graph_out, eager_out, rtol=0, atol=0)
    for name, value in eager_states.items():
        torch.testing.assert_close(graph_states[name], value, rtol=0, atol=0, msg=name)


class DropoutNet(model.Model):
    def __init__(self) -> None:
        super().__init__()
        self.drop = layer.Dropout(0.5)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(x)


def test_graph_mode_draws_a_new_dropout_mask_every_call():
    m = DropoutNet()
    m.graph_backend = "aot_eager"
    x = Tensor(data=np.ones((4, 64), np.float32), requires_grad=False)
    m.compile([x], is_train=False, use_graph=True)
    m.train()
    masks = {tuple(m.forward(x).data.reshape(-1).tolist()) for _ in range(4)}
    assert len(masks) > 1, "graph mode replays one dropout mask"
    m.eval()
    torch.testing.assert_close(m(x).data, x.data)


def test_graph_mode_records_one_node_that_export_refuses():
    m = CNN()
    m.graph_backend = "aot_eager"
    m.compile([PlaceHolder((2, 1, 8, 8))], is_train=False, use_graph=True)
    out = m(data(2)[0])
    assert isinstance(out.creator, model.CompiledForward)
    with pytest.raises(ExportError, match="graph mode"):
        out.creator.export(GraphBuilder(17), ["x"], ["y"])
    m.graph(False)
    assert m(data(2)[0]).creator.op_type == "Gemm"


# ---- load_states against the model -----------------------------------------------------------


def test_load_rejects_states_of_another_model(tmp_path):
    built(BNNet).save_states(tmp_path / "bn.zip")
    with pytest.raises(BadInputError, match=r"states missing from the file: \['conv.b'"):
        built().load_states(tmp_path / "bn.zip")
    with pytest.raises(BadInputError, match="compile it first"):
        CNN().load_states(tmp_path / "bn.zip")
    with pytest.raises(BadInputError, match="aux state 'note' must be a Tensor"):
        built().save_states(tmp_path / "x.zip", aux_states={"note": "hello"})
