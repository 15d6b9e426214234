"""Graph mode compiles under warning filters that make warnings errors (``-W error``): torch's
own deprecation warnings, which its compiler raises, are ignored while sonnx compiles."""

import os
import subprocess
import sys
import warnings

import pytest

from sonnx.compiler_warnings import torch_deprecations_ignored

IMPORTED_MODEL = """
import numpy as np, sonnx
from onnx import TensorProto, helper
graph = helper.make_graph(
    [helper.make_node("Relu", ["x"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
)
rep = sonnx.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                    use_graph=True)
y = rep.run([np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)])[0].numpy()
print(rep.graph_runner.compile_count, y.tolist())
"""

MODEL_TRAINING = """
import numpy as np
from sonnx import autograd, layer, model, opt, tensor
class Net(model.Model):
    def __init__(self):
        super().__init__()
        self.fc = layer.Linear(3)
    def forward(self, x):
        return self.fc(x)
    def train_one_batch(self, x, y):
        loss = autograd.softmax_cross_entropy(self.forward(x), y)
        self.optimizer(loss)
        return loss
net = Net()
net.set_optimizer(opt.SGD(lr=0.1))
x = tensor.from_numpy(np.ones((4, 5), np.float32))
y = tensor.from_numpy(np.eye(3, dtype=np.float32)[[0, 1, 2, 0]])
net.compile([x], is_train=True, use_graph=True)
net.train()
for _ in range(2):
    net.train_one_batch(x, y)
print(net._graph_fallback, len(net._graphs))
"""


def _run_with_warnings_as_errors(script: str) -> list[str]:
    env = {**os.environ, "SONNX_CACHE_DIR": "off"}
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().split(maxsplit=1)


def test_an_imported_model_compiles_with_warnings_as_errors() -> None:
    assert _run_with_warnings_as_errors(IMPORTED_MODEL) == ["1", "[[0.0, 2.0, 0.0, 4.0]]"]


def test_a_model_trains_in_graph_mode_with_warnings_as_errors() -> None:
    assert _run_with_warnings_as_errors(MODEL_TRAINING) == ["None", "1"]


def test_only_deprecations_are_ignored_and_the_filters_come_back() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        before = list(warnings.filters)
        with torch_deprecations_ignored():
            warnings.warn("old API", DeprecationWarning, stacklevel=1)
            warnings.warn("going away", FutureWarning, stacklevel=1)
            with pytest.raises(RuntimeWarning):
                warnings.warn("sonnx's own", RuntimeWarning, stacklevel=1)
        assert warnings.filters == before
        with pytest.raises(DeprecationWarning):
            warnings.warn("old API", DeprecationWarning, stacklevel=1)
