"""Transfer learning on an imported image classifier: a frozen backbone, a new head, an export.

    python examples/transfer_learning.py [--limit N] [--steps 200] [--out transfer.onnx]

1. *The imported model.* A small torch CNN (Conv, BatchNorm, ReLU and pooling, twice, then a
   linear classifier) learns the first five classes of the default data (Fashion-MNIST, or
   scikit-learn's digits where it is not installed) and is exported with ``torch.onnx``: the
   ONNX file stands for any image classifier downloaded from a model zoo.
2. *Transfer.* ``sonnx.SONNXModel`` imports it, cuts it after its backbone, appends a head for
   the other five classes and freezes the backbone: its BatchNormalization nodes then run in
   inference mode (running statistics untouched), so the features the head learns from stay
   those of the imported model.
3. *Export.* ``to_onnx`` writes the backbone as imported and the head after it; onnxruntime
   (when installed) runs the file and agrees with sonnx.
"""

from __future__ import annotations

import argparse
import io
import time
import warnings

import numpy as np
import onnx
import torch
from torch import nn

import sonnx
from sonnx import autograd, layer, opt, tensor
from sonnx.data import load_dataset
from sonnx.tensor import Tensor

#: The backbone's last tensor (the second block's pooling), where the new head joins.
FEATURES = "/features/features.7/MaxPool_output_0"


def pretrained_classifier(images: np.ndarray, labels: np.ndarray, steps: int) -> onnx.ModelProto:
    """A torch CNN trained for ``steps`` batches on ``images``, exported to ONNX (its
    BatchNormalization nodes kept, as a model zoo's classifiers have them)."""
    torch.manual_seed(0)
    net = nn.Sequential()
    net.add_module(
        "features",
        nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        ),
    )  # fmt: skip
    net.add_module("classifier", nn.Sequential(nn.Flatten(), nn.Linear(32 * 7 * 7, 5)))
    sgd = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        idx = rng.integers(0, len(labels), 64)
        loss = nn.functional.cross_entropy(
            net(torch.from_numpy(images[idx])), torch.from_numpy(labels[idx])
        )
        sgd.zero_grad()
        loss.backward()
        sgd.step()
    net.eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes on its TorchScript-based exporter
        torch.onnx.export(
            net,
            (torch.from_numpy(images[:2]),),
            buffer,
            dynamo=False,
            input_names=["image"],
            output_names=["logits"],
            dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
            training=torch.onnx.TrainingMode.PRESERVE,  # keep BatchNormalization nodes
        )
    return onnx.load_from_string(buffer.getvalue())


class Transfer(sonnx.SONNXModel):
    """The imported backbone up to :data:`FEATURES`, then a new head."""

    def __init__(self, onnx_model: onnx.ModelProto, num_classes: int) -> None:
        super().__init__(onnx_model)
        self.flatten = layer.Flatten()
        self.hidden = layer.Linear(64)
        self.relu = layer.ReLU()
        self.head = layer.Linear(num_classes)

    def forward(self, x: Tensor) -> Tensor:
        (features,) = super().forward(x, output=FEATURES)
        return self.head(self.relu(self.hidden(self.flatten(features))))

    def train_one_batch(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def accuracy(net: Transfer, images: np.ndarray, labels: np.ndarray) -> float:
    """The share of ``images`` that ``net`` (in eval mode) classifies as ``labels``."""
    predicted = [
        tensor.to_numpy(net(tensor.from_numpy(images[i : i + 500]))).argmax(1)
        for i in range(0, len(labels), 500)
    ]
    return float((np.concatenate(predicted) == labels).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="examples of each split")
    parser.add_argument("--steps", type=int, default=200, help="batches of each training")
    parser.add_argument("--out", default="transfer.onnx", help="the exported model")
    args = parser.parse_args()
    data = load_dataset().limited(args.limit)
    source, target = data.train_y < 5, data.train_y >= 5
    imported = pretrained_classifier(
        data.train_x[source], data.train_y[source], max(args.steps // 2, 1)
    )

    net = Transfer(imported, num_classes=5)
    net.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    images, labels = data.train_x[target], data.train_y[target] - 5
    net.compile([tensor.from_numpy(images[:64])], is_train=True)
    frozen = net.freeze("features.")  # the convolutions' and BatchNorms' weights and biases
    statistics = {
        n: tensor.to_numpy(t).copy() for n, t in net.get_states().items() if "running" in n
    }
    rng = np.random.default_rng(1)
    started = time.perf_counter()
    for _ in range(args.steps):
        idx = rng.integers(0, len(labels), 64)
        net(tensor.from_numpy(images[idx]), tensor.from_numpy(labels[idx]))
    seconds = time.perf_counter() - started
    unchanged = all(
        np.array_equal(tensor.to_numpy(net.get_states()[n]), before)
        for n, before in statistics.items()
    )

    net.eval()
    test = data.test_y >= 5
    score = accuracy(net, data.test_x[test], data.test_y[test] - 5)
    print(
        f"transfer: {frozen} backbone parameters frozen, {len(statistics)} running statistics "
        f"{'unchanged' if unchanged else 'CHANGED'}; {args.steps} steps in {seconds:.1f} s; "
        f"test accuracy {score:.4f} on {int(test.sum())} images of 5 new classes"
    )

    x = tensor.from_numpy(data.test_x[test][:8])
    net.to_onnx(args.out, [x], input_names=["image"], output_names=["scores"])
    expected = tensor.to_numpy(net(x))
    try:
        import onnxruntime as ort
    except ImportError:
        print(f"exported {args.out} (install onnxruntime to check it)")
        return
    session = ort.InferenceSession(args.out, providers=["CPUExecutionProvider"])
    feed = {"image": tensor.to_numpy(x)}  # the name given to to_onnx
    (scores,) = session.run(None, feed)
    difference = float(np.abs(scores - expected).max())
    print(f"exported {args.out}; onnxruntime agrees within {difference:.1e}")


if __name__ == "__main__":
    main()
