"""lora.save / lora.load in PEFT's layout: a PEFT adapter trained on the transformers original
loads into the onnxruntime-genai build (whose q/k/v projections are fused) and gives PEFT's
logits; what sonnx saves loads back into PEFT and into sonnx with the same logits."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import sonnx.lora as lora
from sonnx.errors import BadInputError
from sonnx.lora import CausalLM, LoraTargetError
from sonnx.tensor import to_numpy
from tests.genai_builds import build, hf_model

peft = pytest.importorskip("peft")

IDS = np.array([[1, 40, 41, 42, 43, 44], [1, 50, 51, 52, 53, 54]])
MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def peft_dir(tmp_path_factory):
    """A PEFT adapter (random A and B, so it changes the output) saved, and its logits."""
    torch.manual_seed(0)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=MODULES, init_lora_weights=False)
    model = peft.get_peft_model(hf_model("llama"), config).eval()
    out = tmp_path_factory.mktemp("peft")
    model.save_pretrained(out)
    with torch.no_grad():
        logits = model(torch.from_numpy(IDS)).logits.numpy()
    return out, logits


def _logits(model: CausalLM) -> np.ndarray:
    return to_numpy(model.forward(IDS))


def test_a_peft_adapter_loads_into_the_fused_build_with_peft_logits(peft_dir) -> None:
    path, expected = peft_dir
    model = CausalLM(build("llama", "fp32"))
    base = _logits(model)
    modules = lora.load(model.rep, path)
    assert "model.layers.0.attn.qkv_proj" in modules and len(modules) == 10
    np.testing.assert_allclose(_logits(model), expected, rtol=1e-4, atol=1e-4)
    assert np.abs(base - expected).max() > 0.1


def test_what_sonnx_saves_loads_into_peft_and_back_into_sonnx(peft_dir, tmp_path) -> None:
    path, expected = peft_dir
    model = CausalLM(build("llama", "fp32"))
    lora.load(model.rep, path)
    saved = lora.save(model.rep, tmp_path / "saved")
    config = json.loads((saved / "adapter_config.json").read_text())
    assert sorted(config["target_modules"]) == sorted(MODULES)
    back = peft.PeftModel.from_pretrained(hf_model("llama"), saved).eval()
    with torch.no_grad():
        peft_logits = back(torch.from_numpy(IDS)).logits.numpy()
    np.testing.assert_allclose(peft_logits, expected, rtol=1e-4, atol=1e-4)
    again = CausalLM(build("llama", "fp32"))
    lora.load(again.rep, saved)
    np.testing.assert_allclose(_logits(again), expected, rtol=1e-4, atol=1e-4)


def test_loading_into_existing_adapters_sets_their_values(tmp_path) -> None:
    torch.manual_seed(1)
    model = CausalLM(build("llama", "fp32"))
    lora.add(model.rep, ["o_proj", "down_proj"], rank=2, alpha=4)
    with torch.no_grad():
        for name, t in model.rep.params.items():
            if "lora_B" in name:
                t.data.normal_(0, 0.2)
    tuned = _logits(model)
    lora.save(model.rep, tmp_path)
    fresh = CausalLM(build("llama", "fp32"))
    lora.add(fresh.rep, ["o_proj", "down_proj"], rank=2, alpha=4)
    lora.load(fresh.rep, tmp_path)
    np.testing.assert_allclose(_logits(fresh), tuned, rtol=1e-5, atol=1e-5)


def test_an_adapter_for_modules_the_graph_lacks_is_a_typed_error(peft_dir) -> None:
    path, _ = peft_dir
    model = CausalLM(build("llama", "fp32"))
    lora.add(model.rep, "o_proj", rank=4, alpha=8)
    with pytest.raises(LoraTargetError, match="the graph has no adapter for"):
        lora.load(model.rep, path)


def test_a_missing_adapter_file_is_a_typed_error(tmp_path) -> None:
    model = CausalLM(build("llama", "fp32"))
    with pytest.raises(BadInputError, match="no adapter weights at"):
        lora.load(model.rep, tmp_path)
