"""The MNIST-style walkthrough, end to end: the main job (``sonnx demo``).

Stages, each timed and reported in a final table:
1. train the seed CNN (SINGA's walkthrough network, built from ``autograd`` layer forms);
2. export it to ``mnist.onnx`` and check that onnxruntime predicts the same class for every
   test image;
3. re-import the file with :func:`sonnx.prepare` and measure its test accuracy;
4. re-train the imported model;
5. transfer-learn: cut the last layer (``last_layers=-2``), append
   Linear(500,128)-ReLU-Linear(128,32)-ReLU-Linear(32,10) and train;
6. export the transferred model and check it with onnxruntime again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sonnx import autograd, layer, model, opt, tensor
from sonnx.data import Dataset, load_dataset
from sonnx.device import Device, get_default_device, set_seed
from sonnx.errors import BadInputError
from sonnx.onnx.exporter import save, to_onnx
from sonnx.runtime.rep import SingaRep, prepare
from sonnx.sonnx_model import apply_update
from sonnx.tensor import Tensor


class CNN:
    """The seed walkthrough's network: two conv/relu/pool blocks and two linear layers."""

    def __init__(self) -> None:
        self.conv1 = autograd.Conv2d(1, 20, 5, padding=0)
        self.conv2 = autograd.Conv2d(20, 50, 5, padding=0)
        self.linear1 = autograd.Linear(4 * 4 * 50, 500)
        self.linear2 = autograd.Linear(500, 10)
        self.pooling1 = autograd.MaxPool2d(2, 2, padding=0)
        self.pooling2 = autograd.MaxPool2d(2, 2, padding=0)

    def forward(self, x: Tensor) -> Tensor:
        y = self.pooling1(autograd.relu(self.conv1(x)))
        y = self.pooling2(autograd.relu(self.conv2(y)))
        y = autograd.relu(self.linear1(autograd.flatten(y)))
        return self.linear2(y)


class LayerCNN(model.Model):
    """The same network written with the ``layer``/``Model`` API.

    ``train_one_batch`` takes SINGA's ``dist_option`` and ``spars``, so the model trains with a
    plain optimizer or with :class:`sonnx.opt.DistOpt` in any of its five modes.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = layer.Conv2d(20, 5)
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

    def train_one_batch(
        self, x: Tensor, y: Tensor, dist_option: str = "fp32", spars: float | None = None
    ) -> tuple[Tensor, Tensor]:
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, y)
        apply_update(self.optimizer, loss, dist_option, spars)
        return out, loss


class Imported:
    """An imported model as a network (the seed's ``Infer``); its float weights are already
    trainable parameters, as :func:`sonnx.prepare` makes them."""

    def __init__(self, rep: SingaRep) -> None:
        self.rep = rep

    def forward(self, x: Tensor) -> Tensor:
        return self.rep.run([x])[0]


class Transferred:
    """The imported network cut before its last layer, with three new Linear layers."""

    def __init__(self, rep: SingaRep, last_layers: int = -2) -> None:
        self.rep = rep
        self.last_layers = last_layers
        self.append_linear1 = autograd.Linear(500, 128)
        self.append_linear2 = autograd.Linear(128, 32)
        self.append_linear3 = autograd.Linear(32, 10)

    def forward(self, x: Tensor) -> Tensor:
        y = self.rep.run([x], last_layers=self.last_layers)[0]
        y = autograd.relu(self.append_linear1(y))
        y = autograd.relu(self.append_linear2(y))
        return self.append_linear3(y)


@dataclass
class StageResult:
    name: str
    seconds: float
    accuracy: float | None = None
    note: str = ""


@dataclass
class History:
    """Loss and accuracy per logged step, by stage, for the curves PNG."""

    curves: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)


def _batches(n: int, batch_size: int, rng: np.random.Generator | None) -> Iterator[np.ndarray]:
    order = rng.permutation(n) if rng is not None else np.arange(n)
    for start in range(0, n - batch_size + 1, batch_size):
        yield order[start : start + batch_size]


POINTS_PER_CURVE = 100  # each point averages the loss and accuracy of the steps since the last


def train(
    forward: Callable[[Tensor], Tensor],
    data: Dataset,
    epochs: int,
    batch_size: int,
    sgd: opt.SGD,
    dev: Device,
    label: str,
    history: History,
    progress: bool = True,
) -> None:
    """SGD training of ``forward`` on the training split, logging mean loss and accuracy."""
    rng = np.random.default_rng(0)
    autograd.training = True
    curve = history.curves.setdefault(label, [])
    steps = (len(data.train_y) // batch_size) * epochs
    bar = _progress(steps, label, progress)
    log_every = max(1, steps // POINTS_PER_CURVE)
    step, loss_sum, acc_sum = 0, 0.0, 0.0
    for _ in range(epochs):
        for idx in _batches(len(data.train_y), batch_size, rng):
            x = Tensor(device=dev, data=data.train_x[idx], requires_grad=False)
            y = Tensor(device=dev, data=data.train_y[idx], requires_grad=False)
            out = forward(x)
            loss = autograd.softmax_cross_entropy(out, y)
            sgd(loss)
            step += 1
            loss_sum += float(tensor.to_numpy(loss)[0])
            acc_sum += float((tensor.to_numpy(out).argmax(1) == data.train_y[idx]).mean())
            if step % log_every == 0:
                curve.append((step, loss_sum / log_every, acc_sum / log_every))
                bar.set_postfix(loss=f"{curve[-1][1]:.3f}", acc=f"{curve[-1][2]:.3f}")
                loss_sum, acc_sum = 0.0, 0.0
            bar.update(1)
    bar.close()
    autograd.training = False


def predict(
    forward: Callable[[Tensor], Tensor], images: np.ndarray, dev: Device, batch_size: int = 500
) -> np.ndarray:
    """Predicted class of every image, in inference mode."""
    autograd.training = False
    classes = []
    for start in range(0, len(images), batch_size):
        x = Tensor(device=dev, data=images[start : start + batch_size], requires_grad=False)
        classes.append(tensor.to_numpy(forward(x)).argmax(1))
    return np.concatenate(classes)


def onnxruntime_predict(path: Path, images: np.ndarray, batch_size: int = 500) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.concatenate(
        [
            session.run(None, {name: images[s : s + batch_size]})[0].argmax(1)
            for s in range(0, len(images), batch_size)
        ]
    )


def export_and_check(
    forward: Callable[[Tensor], Tensor], data: Dataset, dev: Device, path: Path, name: str
) -> tuple[float, int]:
    """Export via a traced forward, save, and compare onnxruntime's classes with sonnx's.

    Returns sonnx's test accuracy and the number of test images where the two disagree.
    """
    autograd.training = False
    x = Tensor(device=dev, data=data.test_x[:2], requires_grad=False, name="input")
    y = forward(x)
    y.name = "logits"
    save(to_onnx([x], [y], model_name=name), path)
    ours = predict(forward, data.test_x, dev)
    theirs = onnxruntime_predict(path, data.test_x)
    return float((ours == data.test_y).mean()), int((ours != theirs).sum())


def run_walkthrough(
    out_dir: Path,
    epochs: int = 1,
    limit: int | None = None,
    data_dir: str | None = None,
    batch_size: int = 64,
    lr: float = 0.05,
    momentum: float = 0.9,
    progress: bool = True,
    dev: Device | None = None,
) -> list[StageResult]:
    """Run the six stages; write ``mnist.onnx``, ``transfer.onnx`` and ``curves.png``.

    ``limit`` keeps the first ``limit`` images of the training set and of the test set; fewer
    than one batch is refused (no training step would run)."""
    if limit is not None and limit < batch_size:
        raise BadInputError(
            f"demo: limit {limit} keeps fewer images than one batch ({batch_size}), so no "
            f"training step would run; use a limit of at least {batch_size} (it cuts both the "
            "training and the test set) or a smaller batch size"
        )
    dev = dev or get_default_device()
    out_dir.mkdir(parents=True, exist_ok=True)
    data = load_dataset(data_dir).limited(limit)
    history = History()
    results: list[StageResult] = []

    def stage(name: str, fn: Callable[[], StageResult]) -> StageResult:
        start = time.perf_counter()
        result = fn()
        result.seconds = time.perf_counter() - start
        results.append(result)
        print(f"  {name}: done in {result.seconds:.1f} s {result.note}")
        return result

    print(f"data: {data.name} ({len(data.train_y)} train / {len(data.test_y)} test images)")
    set_seed(0)  # reproducible initial weights (examples/layer_api_mnist.py uses the same)
    model = CNN()
    sgd = lambda: opt.SGD(lr=lr, momentum=momentum)  # noqa: E731  (one fresh optimizer per stage)

    def train_seed() -> StageResult:
        train(model.forward, data, epochs, batch_size, sgd(), dev, "1 train CNN", history, progress)
        acc = float((predict(model.forward, data.test_x, dev) == data.test_y).mean())
        return StageResult("1 train seed CNN", 0.0, acc)

    def export_seed() -> StageResult:
        acc, diff = export_and_check(model.forward, data, dev, out_dir / "mnist.onnx", "mnist")
        return StageResult(
            "2 export mnist.onnx + onnxruntime",
            0.0,
            acc,
            f"onnxruntime disagrees on {diff} of {len(data.test_y)} images",
        )

    rep_holder: dict[str, SingaRep] = {}

    def reimport() -> StageResult:
        rep_holder["rep"] = prepare(out_dir / "mnist.onnx", device=dev)
        imported = Imported(rep_holder["rep"])
        acc = float((predict(imported.forward, data.test_x, dev) == data.test_y).mean())
        return StageResult("3 re-import + infer", 0.0, acc)

    def retrain() -> StageResult:
        imported = Imported(rep_holder["rep"])
        train(
            imported.forward,
            data,
            epochs,
            batch_size,
            opt.SGD(lr=lr / 5, momentum=momentum),
            dev,
            "4 re-train",
            history,
            progress,
        )
        acc = float((predict(imported.forward, data.test_x, dev) == data.test_y).mean())
        return StageResult("4 re-train imported", 0.0, acc)

    transferred: dict[str, Transferred] = {}

    def transfer() -> StageResult:
        rep = prepare(out_dir / "mnist.onnx", device=dev)
        transferred["model"] = Transferred(rep, last_layers=-2)
        train(
            transferred["model"].forward,
            data,
            epochs,
            batch_size,
            sgd(),
            dev,
            "5 transfer",
            history,
            progress,
        )
        acc = float((predict(transferred["model"].forward, data.test_x, dev) == data.test_y).mean())
        return StageResult("5 transfer-learn (cut + 3 Linear)", 0.0, acc)

    def export_transfer() -> StageResult:
        acc, diff = export_and_check(
            transferred["model"].forward, data, dev, out_dir / "transfer.onnx", "mnist_transfer"
        )
        return StageResult(
            "6 export transfer.onnx + onnxruntime",
            0.0,
            acc,
            f"onnxruntime disagrees on {diff} of {len(data.test_y)} images",
        )

    for name, fn in [
        ("train", train_seed),
        ("export", export_seed),
        ("re-import", reimport),
        ("re-train", retrain),
        ("transfer", transfer),
        ("export transfer", export_transfer),
    ]:
        stage(name, fn)
    plot_curves(history, out_dir / "curves.png")
    return results


def _progress(total: int, label: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=label, disable=not enabled, leave=False, ncols=100)


def plot_curves(history: History, path: Path) -> None:
    """Loss and accuracy against step, one line per training stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for label, points in history.curves.items():
        if not points:
            continue
        steps, losses, accs = zip(*points, strict=True)
        ax_loss.plot(steps, losses, ".-", label=label)
        ax_acc.plot(steps, accs, ".-", label=label)
    ax_loss.set(xlabel="step", ylabel="training loss (running mean)", title="loss")
    ax_acc.set(
        xlabel="step",
        ylabel="training accuracy (running mean)",
        title="accuracy",
        ylim=(0, 1),
    )
    ax_loss.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def format_table(results: list[StageResult]) -> str:
    rows = [f"{'stage':<40} {'test acc':>9} {'time (s)':>9}  note"]
    for r in results:
        acc = "" if r.accuracy is None else f"{r.accuracy:.4f}"
        rows.append(f"{r.name:<40} {acc:>9} {r.seconds:>9.1f}  {r.note}")
    return "\n".join(rows)
