"""GPT-2-, ViT- and T5-style encoders (transformers' layers at tiny sizes, random weights)
exported by torch and fused by onnxruntime's transformer optimizer: sonnx runs the optimizer's
in-memory result as onnxruntime does (1e-4 relative), although its fused com.microsoft nodes
come without a com.microsoft opset import, and exports it back to the same nodes. A small CNN
through the optimizer's channels-last fusion (NhwcConv, which onnxruntime runs only on CUDA)
equals onnxruntime's run of the unfused model."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import transformers
from onnxruntime.transformers.fusion_nhwc_conv import FusionNhwcConv
from onnxruntime.transformers.onnx_model import OnnxModel
from onnxruntime.transformers.optimizer import optimize_model

import sonnx
from sonnx.onnx.exporter import to_onnx
from sonnx.tensor import Tensor, to_numpy

HIDDEN, HEADS, VOCAB, BATCH, SEQ = 32, 4, 100, 2, 8


class Gpt2(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = transformers.GPT2Config(
            vocab_size=VOCAB, n_positions=32, n_embd=HIDDEN, n_layer=2, n_head=HEADS
        )
        self.model = transformers.GPT2Model(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return out.last_hidden_state


class Vit(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = transformers.ViTConfig(
            image_size=16, patch_size=4, hidden_size=HIDDEN, num_hidden_layers=2,
            num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
        )  # fmt: skip
        self.model = transformers.ViTModel(config)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).last_hidden_state


class T5Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = transformers.T5Config(
            vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=2 * HIDDEN,
            num_layers=2, num_heads=HEADS,
        )  # fmt: skip
        self.model = transformers.T5EncoderModel(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _text_feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    mask = np.ones((BATCH, SEQ), np.int64)
    mask[1, SEQ - 3 :] = 0
    return {"input_ids": rng.integers(0, VOCAB, (BATCH, SEQ)), "attention_mask": mask}


def _image_feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"pixel_values": rng.standard_normal((BATCH, 3, 16, 16)).astype(np.float32)}


#: model type for the optimizer -> (module, feeds, the fused ops it must write)
STYLES: dict[str, tuple[type[torch.nn.Module], Callable[[], dict], dict[str, int]]] = {
    "gpt2": (Gpt2, _text_feeds, {"SkipLayerNormalization": 4, "FastGelu": 2}),
    "vit": (Vit, _image_feeds, {"SkipLayerNormalization": 4, "BiasGelu": 2}),
    "t5": (T5Encoder, _text_feeds, {"SkipSimplifiedLayerNormalization": 4}),
}


def _optimized(style: str, opt_level: int, directory: Path) -> onnx.ModelProto:
    """The style's module exported by torch (opset 17, dynamic batch), then the optimizer's
    in-memory model, as ``optimize_model(...).model`` returns it."""
    module_type, feeds, _ = STYLES[style]
    torch.manual_seed(0)
    names = list(feeds())
    path = directory / f"{style}.onnx"
    torch.onnx.export(
        module_type().eval(), tuple(torch.from_numpy(a) for a in feeds().values()), str(path),
        input_names=names, output_names=["output"], dynamic_axes={n: {0: "batch"} for n in names},
        opset_version=17, dynamo=False,
    )  # fmt: skip
    optimizer = optimize_model(
        str(path), model_type=style, num_heads=HEADS, hidden_size=HIDDEN, opt_level=opt_level
    )
    return optimizer.model


@pytest.fixture(scope="module", params=[(s, level) for s in STYLES for level in (0, 2)],
                ids=lambda p: f"{p[0]}-level{p[1]}")  # fmt: skip
def optimized(request, tmp_path_factory) -> tuple[str, int, onnx.ModelProto]:
    """(model type, opt_level, the optimizer's in-memory model)."""
    style, level = request.param
    return style, level, _optimized(style, level, tmp_path_factory.mktemp(style))


def _fused(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node if n.domain == "com.microsoft")


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_optimizer_fuses_without_importing_com_microsoft(optimized) -> None:
    """At opt_level 0 the optimizer's model uses com.microsoft without importing it (from
    level 1 onnxruntime rewrites the model first, and the result imports every domain)."""
    style, level, model = optimized
    assert _fused(model) == STYLES[style][2]
    assert ("com.microsoft" in {o.domain for o in model.opset_import}) == (level > 0)


def test_optimized_model_equals_onnxruntime_and_exports_as_it_came(optimized) -> None:
    style, _, model = optimized
    feeds = STYLES[style][1]()
    inputs = [Tensor(data=a, requires_grad=False, name=n) for n, a in feeds.items()]
    outputs = sonnx.prepare(model).run({t.name: t for t in inputs})
    for e, g in zip(_onnxruntime(model, feeds), outputs, strict=True):
        np.testing.assert_allclose(to_numpy(g), e, rtol=1e-4, atol=1e-5)
    exported = to_onnx(inputs, outputs)
    assert _fused(exported) == _fused(model)
    for e, g in zip(_onnxruntime(exported, feeds), outputs, strict=True):
        np.testing.assert_allclose(to_numpy(g), e, rtol=1e-4, atol=1e-5)


def test_channels_last_fusion_of_a_cnn_equals_the_unfused_model(tmp_path) -> None:
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.SiLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, groups=2), torch.nn.SiLU(),
    )  # fmt: skip
    path = tmp_path / "cnn.onnx"
    torch.onnx.export(cnn.eval(), (torch.randn(2, 3, 8, 8),), str(path), input_names=["x"],
                      opset_version=17, dynamo=False)  # fmt: skip
    fused = OnnxModel(onnx.load(path))
    FusionNhwcConv(fused, update_weight=True).apply()
    fused.topological_sort()
    assert _fused(fused.model) == {"NhwcConv": 2}
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    (expected,) = _onnxruntime(onnx.load(path), {"x": x})
    inputs = [Tensor(data=x, requires_grad=False, name="x")]
    (got,) = sonnx.prepare(fused.model).run({"x": inputs[0]})
    np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-4, atol=1e-5)
    assert _fused(to_onnx(inputs, [got])) == {"NhwcConv": 2}
