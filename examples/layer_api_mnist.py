"""A CNN written with the layer/Model API, trained with compile + train_one_batch.

    python examples/layer_api_mnist.py [--epochs 1] [--limit N] [--graph]

Same data, order (shuffled with seed 0), optimizer (SGD lr 0.05, momentum 0.9) and batch (64)
as ``sonnx demo``'s first stage, so the two test accuracies compare the two APIs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sonnx import autograd, device, layer, model, opt, tensor
from sonnx.data import load_dataset
from sonnx.tensor import Tensor


class CNN(model.Model):
    """The walkthrough's network (``sonnx demo``'s first stage) in the layer API: layers are
    declared in ``__init__`` with their output sizes only (input sizes come from the first
    batch), connected in ``forward``; ``train_one_batch`` is one optimisation step."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = layer.Conv2d(20, 5)  # 20 output channels, 5x5 kernel
        self.pool1 = layer.MaxPool2d(2, 2)
        self.conv2 = layer.Conv2d(50, 5)
        self.pool2 = layer.MaxPool2d(2, 2)
        self.flatten = layer.Flatten()
        self.linear1 = layer.Linear(500)
        self.linear2 = layer.Linear(10)
        self.relu = layer.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        y = self.pool1(self.relu(self.conv1(x)))
        y = self.pool2(self.relu(self.conv2(y)))
        return self.linear2(self.relu(self.linear1(self.flatten(y))))

    def train_one_batch(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        self.optimizer(loss)  # backward, update every parameter, step
        return out, loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--graph", action="store_true", help="compile with use_graph=True")
    args = parser.parse_args()
    device.set_seed(0)
    data = load_dataset().limited(args.limit)
    net = CNN()
    net.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    net.compile([tensor.PlaceHolder((64, 1, 28, 28))], is_train=True, use_graph=args.graph)
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    for _ in range(args.epochs):
        order = rng.permutation(len(data.train_y))
        for start in range(0, len(order) - 63, 64):
            idx = order[start : start + 64]
            net(
                tensor.Tensor(data=data.train_x[idx], requires_grad=False),
                tensor.Tensor(data=data.train_y[idx], requires_grad=False),
            )
    seconds = time.perf_counter() - started
    net.eval()
    predicted = np.concatenate(
        [
            tensor.to_numpy(net(tensor.Tensor(data=data.test_x[i : i + 500]))).argmax(1)
            for i in range(0, len(data.test_y), 500)
        ]
    )
    print(
        f"layer/Model API CNN: test accuracy {(predicted == data.test_y).mean():.4f} "
        f"after {args.epochs} epoch(s), {seconds:.1f} s of training"
    )


if __name__ == "__main__":
    main()
