"""The seed walkthrough's code runs on sonnx with only its import lines changed.

The functions and classes between the ``--- seed ---`` markers are the seed text (SINGA's
ONNX walkthrough); only the ``from singa import …`` lines became ``from sonnx import …``.
The seed downloads MNIST; here it gets a small slice of the default data instead.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

# --- seed (imports changed) ---------------------------------------------------------------
import sonnx
from sonnx import autograd, device, opt, tensor
from sonnx.data import load_dataset


def to_categorical(y, num_classes):
    y = np.array(y, dtype="int")
    n = y.shape[0]
    categorical = np.zeros((n, num_classes))
    categorical[np.arange(n), y] = 1
    categorical = categorical.astype(np.float32)
    return categorical


class CNN:
    def __init__(self):
        self.conv1 = autograd.Conv2d(1, 20, 5, padding=0)
        self.conv2 = autograd.Conv2d(20, 50, 5, padding=0)
        self.linear1 = autograd.Linear(4 * 4 * 50, 500)
        self.linear2 = autograd.Linear(500, 10)
        self.pooling1 = autograd.MaxPool2d(2, 2, padding=0)
        self.pooling2 = autograd.MaxPool2d(2, 2, padding=0)

    def forward(self, x):
        y = self.conv1(x)
        y = autograd.relu(y)
        y = self.pooling1(y)
        y = self.conv2(y)
        y = autograd.relu(y)
        y = self.pooling2(y)
        y = autograd.flatten(y)
        y = self.linear1(y)
        y = autograd.relu(y)
        y = self.linear2(y)
        return y


def accuracy(pred, target):
    y = np.argmax(pred, axis=1)
    t = np.argmax(target, axis=1)
    a = y == t
    return np.array(a, "int").sum() / float(len(t))


def train(model, x, y, epochs=1, batch_size=64, dev=device.get_default_device()):
    batch_number = x.shape[0] // batch_size

    for i in range(epochs):
        for b in range(batch_number):
            l_idx = b * batch_size
            r_idx = (b + 1) * batch_size

            x_batch = tensor.Tensor(device=dev, data=x[l_idx:r_idx])
            target_batch = tensor.Tensor(device=dev, data=y[l_idx:r_idx])

            output_batch = model.forward(x_batch)

            loss = autograd.softmax_cross_entropy(output_batch, target_batch)
            accuracy_rate = accuracy(tensor.to_numpy(output_batch), tensor.to_numpy(target_batch))

            sgd = opt.SGD(lr=0.01)
            for p, gp in autograd.backward(loss):
                sgd.update(p, gp)
            sgd.step()

            if (i * b) % 200 == 0:
                print("acc %6.2f loss, %6.2f" % (accuracy_rate, tensor.to_numpy(loss)[0]))
    print("training completed")
    return x_batch, output_batch


class Infer:
    def __init__(self, sg_ir):
        self.sg_ir = sg_ir
        for idx, tens in sg_ir.tensor_map.items():
            # allow the tensors to be updated
            tens.requires_grad = True
            tens.stores_grad = True
            sg_ir.tensor_map[idx] = tens

    def forward(self, x):
        return sg_ir.run([x])[0]  # we can run one layer by one layer


def re_train(sg_ir, x, y, epochs=1, batch_size=64, dev=device.get_default_device()):
    batch_number = x.shape[0] // batch_size

    new_model = Infer(sg_ir)

    for i in range(epochs):
        for b in range(batch_number):
            l_idx = b * batch_size
            r_idx = (b + 1) * batch_size

            x_batch = tensor.Tensor(device=dev, data=x[l_idx:r_idx])
            target_batch = tensor.Tensor(device=dev, data=y[l_idx:r_idx])

            output_batch = new_model.forward(x_batch)

            loss = autograd.softmax_cross_entropy(output_batch, target_batch)
            accuracy_rate = accuracy(tensor.to_numpy(output_batch), tensor.to_numpy(target_batch))

            sgd = opt.SGD(lr=0.01)
            for p, gp in autograd.backward(loss):
                sgd.update(p, gp)
            sgd.step()

            if b % 1e2 == 0:
                print("acc %6.2f loss, %6.2f" % (accuracy_rate, tensor.to_numpy(loss)[0]))
    print("re-training completed")
    return new_model


class Trans:
    def __init__(self, sg_ir, last_layers):
        self.sg_ir = sg_ir
        self.last_layers = last_layers
        self.append_linear1 = autograd.Linear(500, 128, bias=False)
        self.append_linear2 = autograd.Linear(128, 32, bias=False)
        self.append_linear3 = autograd.Linear(32, 10, bias=False)

    def forward(self, x):
        y = sg_ir.run([x], last_layers=self.last_layers)[0]
        y = self.append_linear1(y)
        y = autograd.relu(y)
        y = self.append_linear2(y)
        y = autograd.relu(y)
        y = self.append_linear3(y)
        y = autograd.relu(y)
        return y


# --- end of seed --------------------------------------------------------------------------

sg_ir = None  # the seed's Infer/Trans read a module-level `sg_ir`, as in its script


@pytest.fixture(scope="module")
def data():
    d = load_dataset()
    return (
        d.train_x[:1920],
        to_categorical(d.train_y[:1920], 10),
        d.test_x[:500],
        to_categorical(d.test_y[:500], 10),
    )


def _test_accuracy(forward, x, y) -> float:
    autograd.training = False
    return accuracy(tensor.to_numpy(forward(tensor.Tensor(data=x))), y)


@pytest.fixture(scope="module")
def trained(data):
    """The seed's main: train the CNN, export it with sonnx.to_onnx([x], [y])."""
    train_x, train_y, _, _ = data
    model = CNN()
    autograd.training = True
    try:
        x, y = train(model, train_x, train_y)
    finally:
        autograd.training = False
    return model, onnx.load_from_string(sonnx.to_onnx([x], [y]).SerializeToString())


def test_seed_cnn_trains_and_exports(trained, data):
    model, onnx_model = trained
    _, _, test_x, test_y = data
    onnx.checker.check_model(onnx_model)
    assert _test_accuracy(model.forward, test_x, test_y) > 0.3  # 30 plain-SGD steps at lr 0.01
    assert [n.op_type for n in onnx_model.graph.node] == [
        "Conv",
        "Relu",
        "MaxPool",
        "Conv",
        "Relu",
        "MaxPool",
        "Flatten",
        "Gemm",
        "Relu",
        "Gemm",
    ]


def test_seed_infer_and_re_train(trained, data):
    global sg_ir
    model, onnx_model = trained
    train_x, train_y, test_x, test_y = data
    sg_ir = sonnx.prepare(onnx_model, device=device.get_default_device())
    before = _test_accuracy(Infer(sg_ir).forward, test_x, test_y)
    assert before == pytest.approx(_test_accuracy(model.forward, test_x, test_y))
    autograd.training = True
    new_model = re_train(sg_ir, train_x, train_y)
    after = _test_accuracy(new_model.forward, test_x, test_y)
    assert after >= before - 0.02


def test_seed_transfer_learning_cut_and_append(trained, data):
    global sg_ir
    _, onnx_model = trained
    train_x, train_y, test_x, test_y = data
    sg_ir = sonnx.prepare(onnx_model, device=device.get_default_device())
    # The seed text passes -1 here, from a version where -1 dropped the last node; under the
    # documented meaning (-1 runs everything) dropping the last layer is -2.
    model = Trans(sg_ir, -2)
    autograd.training = True
    losses = []
    for b in range(20):
        x = tensor.Tensor(data=train_x[b * 64 : (b + 1) * 64])
        t = tensor.Tensor(data=train_y[b * 64 : (b + 1) * 64])
        loss = autograd.softmax_cross_entropy(model.forward(x), t)
        sgd = opt.SGD(lr=0.05)
        for p, gp in autograd.backward(loss):
            sgd.update(p, gp)
        sgd.step()
        losses.append(float(tensor.to_numpy(loss)[0]))
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    assert _test_accuracy(model.forward, test_x, test_y) > 0.3
