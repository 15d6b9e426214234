"""Greedy decoding of onnxruntime-genai's own builds equals its Generator's tokens, exactly.

The builds (:mod:`tests.genai_builds`) are tiny random-weight llama, qwen2, phi3 and mistral
models written by onnxruntime-genai's builder in float32 and int4 (MatMulNBits at accuracy
level 4, GroupQueryAttention with a shared past/present buffer, which sonnx writes in place):
their directories are what a user downloads, so ``sonnx.generate`` reads them as they are.
The first prompt (24 tokens) and its 32 new ones cross mistral's 48-token sliding window.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import sonnx
from sonnx.generation import load_decoder
from tests.genai_builds import SENTENCES, build

NEW_TOKENS = 32


def genai_greedy(model_dir: Path, prompt: np.ndarray) -> np.ndarray:
    """onnxruntime-genai's greedy tokens: the prompt and exactly ``NEW_TOKENS`` more."""
    import onnxruntime_genai as og

    model = og.Model(str(model_dir))
    params = og.GeneratorParams(model)
    length = len(prompt) + NEW_TOKENS
    params.set_search_options(max_length=length, min_length=length, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    return np.asarray(generator.get_sequence(0))


@pytest.mark.parametrize("precision", ["fp32", "int4"])
@pytest.mark.parametrize("family", ["llama", "qwen2", "phi3", "mistral"])
def test_greedy_equals_onnxruntime_genai(family: str, precision: str) -> None:
    model_dir = build(family, precision)
    model = load_decoder(model_dir)
    assert model.layout.share_buffer  # the builder's CPU config preallocates the past
    for sentence in SENTENCES[:2]:
        prompt = np.asarray(model.tokenizer.encode(sentence))
        expected = genai_greedy(model_dir, prompt)
        # min_length keeps genai going past an end token; sonnx is told of no end token.
        got = model.generate(prompt, max_new_tokens=NEW_TOKENS, eos_token_id=None)[0]
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("shared", [True, False])
def test_left_padded_batch_equals_each_prompt_alone(shared: bool) -> None:
    """GroupQueryAttention takes padding on the right: the decoder moves it there, with the
    builder's shared past buffer and with a past that grows step by step."""
    model = load_decoder(build("llama", "fp32"))
    assert model.layout.right_padded
    layout = dataclasses.replace(model.layout, share_buffer=shared)
    prompts = [model.tokenizer.encode(s) for s in SENTENCES[:3]]
    assert len({len(p) for p in prompts}) == 3
    batch = model.generate(prompts, max_new_tokens=8, eos_token_id=None, layout=layout)
    for row, prompt in zip(batch, prompts, strict=True):
        alone = model.generate(prompt, max_new_tokens=8, eos_token_id=None, layout=layout)[0]
        np.testing.assert_array_equal(row[-8:], alone[-8:])


def test_text_in_text_out_on_a_genai_directory() -> None:
    model_dir = build("llama", "fp32")
    model = load_decoder(model_dir)
    text = sonnx.generate(model_dir, SENTENCES[0], max_new_tokens=8)
    prompt = model.tokenizer.encode(SENTENCES[0])
    ids = model.generate(prompt, max_new_tokens=8)[0, len(prompt) :]
    assert text == model.tokenizer.decode(ids.tolist(), skip_special_tokens=True)
