"""A LoRA-tuned ``CausalLM`` generates as it is (issue 47, item 8): ``model.generate`` runs the
adapted graph with the directory's end tokens, cache layout and tokenizer, no
``load_decoder(dir, rep=model.rep)``; token ids give the learned continuation, as
onnxruntime-genai gives it on the merged export, and text gives text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

import sonnx.lora as lora
from tests.genai_builds import build
from tests.lora.test_export import _batch, _encode, _generate, _tuned

pytest.importorskip("onnxruntime_genai")


def test_tuned_model_generates_its_continuation(tmp_path: Path) -> None:
    model, _ = _tuned("fp32")
    source = build("llama", "fp32")
    _, _, prompts, tail = _batch(source)
    merged = lora.export(model.rep, tmp_path / "merged")
    for prompt in prompts:
        out = model.generate(np.array([prompt]), max_new_tokens=len(tail))
        assert out[0, : len(prompt)].tolist() == prompt
        assert out[0, len(prompt) :].tolist() == tail == _generate(merged, prompt)[: len(tail)]
    text = "hello world"
    ids = model.generate(np.array([_encode(source, text)]), max_new_tokens=4)
    decoded = Tokenizer.from_file(str(source / "tokenizer.json")).decode(
        ids[0, len(_encode(source, text)) :].tolist(), skip_special_tokens=True
    )
    assert model.generate(text, max_new_tokens=4) == decoded
