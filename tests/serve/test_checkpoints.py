"""A sonnx checkpoint (``model.sonnx`` + the class named in config.json) is served like its
ONNX export: the server's answer equals the model's own forward."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient

from sonnx.serve.checkpoints import checkpoint_to_onnx
from sonnx.serve.config import parse_config
from sonnx.serve.errors import ConfigError
from sonnx.tensor import Tensor, to_numpy
from sonnx.walkthrough import LayerCNN
from tests.serve import helpers


def test_a_checkpoint_is_served_with_symbolic_batch_and_its_own_answers(client, repository):
    meta = client.get_model_metadata("checkpoint")
    assert meta["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 1, 28, 28]}]
    model = LayerCNN()
    x = np.random.default_rng(0).standard_normal((3, 1, 28, 28)).astype(np.float32)
    model.compile([Tensor(data=x, requires_grad=False)], is_train=False)
    model.load_states(repository / "checkpoint" / "1" / "model.sonnx")
    model.eval()
    expected = to_numpy(model.forward(Tensor(data=x, requires_grad=False)))
    given = httpclient.InferInput("image", list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    (name,) = [o["name"] for o in meta["outputs"]]
    got = client.infer("checkpoint", [given]).as_numpy(name)
    # the server runs the exported graph, whose Conv+BatchNorm+Relu is one oneDNN call with
    # the norm folded into the weight: float32 rounding differs from the layers' separate steps
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_class": "sonnx.walkthrough"}, 'as "package.module:ClassName"'),
        ({"model_class": "sonnx.nowhere:Model"}, "cannot import model_class"),
        ({"model_class": "sonnx.walkthrough:History"}, "is not a sonnx Model subclass"),
        ({"inputs": {}}, "a checkpoint needs 'inputs'"),
    ],
)
def test_checkpoint_configuration_errors_name_what_is_wrong(tmp_path, change, message) -> None:
    path = helpers.write_checkpoint(tmp_path, "m", 1)
    config = parse_config({**helpers.CHECKPOINT_CONFIG, **change}, "config.json")
    with pytest.raises(ConfigError, match=message):
        checkpoint_to_onnx(path, config, "config.json")
