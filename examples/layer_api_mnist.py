"""The walkthrough CNN written with the layer/Model API, trained with compile + train_one_batch.

    python examples/layer_api_mnist.py [--epochs 1] [--limit N] [--graph]

Same data, order (shuffled with seed 0), optimizer (SGD lr 0.05, momentum 0.9) and batch (64)
as ``sonnx demo``'s first stage, so the two test accuracies compare the two APIs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sonnx import device, opt, tensor
from sonnx.data import load_dataset
from sonnx.walkthrough import LayerCNN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--graph", action="store_true", help="compile with use_graph=True")
    args = parser.parse_args()
    device.set_seed(0)
    data = load_dataset().limited(args.limit)
    net = LayerCNN()
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
