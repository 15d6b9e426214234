"""A decoder's context length and vocabulary, found in the graph and its configs, and checked
before a run (issue 47 item 9, 10)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import sonnx
from sonnx.errors import BadInputError
from sonnx.generation import load_decoder
from sonnx.generation.limits import (
    DecoderLimits,
    check_context,
    check_token_ids,
    decoder_limits,
)
from sonnx.testing.gqa_decoder import GENAI_CONFIG, MAX_POSITIONS, VOCAB, gqa_decoder


@pytest.fixture(scope="module")
def gqa_rep(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("gqa") / "model.onnx"
    onnx.save(gqa_decoder(), str(path))
    return sonnx.prepare(str(path))


def test_the_graph_gives_the_rotary_rows_and_the_vocabulary(gqa_rep) -> None:
    assert decoder_limits(gqa_rep) == DecoderLimits(MAX_POSITIONS, VOCAB)


def test_a_smaller_configured_limit_holds(gqa_rep) -> None:
    genai = {**GENAI_CONFIG, "model": {**GENAI_CONFIG["model"], "context_length": 40}}
    assert decoder_limits(gqa_rep, genai_config=genai).context_length == 40
    hf = {"max_position_embeddings": 4096, "vocab_size": 30}
    assert decoder_limits(gqa_rep, hf_config=hf) == DecoderLimits(MAX_POSITIONS, 30)


def test_an_optimum_directory_reads_transformers_config(llama_dir: Path) -> None:
    config = json.loads((llama_dir / "config.json").read_text())
    limits = load_decoder(llama_dir).layout.limits
    assert limits == DecoderLimits(config["max_position_embeddings"], config["vocab_size"])


def test_generate_refuses_ids_outside_the_vocabulary_before_running(gqa_rep) -> None:
    with pytest.raises(BadInputError, match=r"must be in \[0, 47\] .* received -5"):
        gqa_rep.generate([1, -5], max_new_tokens=2)
    with pytest.raises(BadInputError, match=r"received 99999"):
        gqa_rep.generate(np.array([[1, 99999]]), attention_mask=np.ones((1, 2)), max_new_tokens=2)
    with pytest.raises(BadInputError, match="token ids must be integers"):
        gqa_rep.generate([[1.0, 2.5]], max_new_tokens=2)


def test_generate_refuses_a_length_past_the_context(gqa_rep) -> None:
    with pytest.raises(
        BadInputError, match="past the model's context length of 64; ask for at most 62"
    ):
        gqa_rep.generate([1, 5], max_new_tokens=63)
    assert gqa_rep.generate([1, 5], max_new_tokens=62).shape == (1, 64)


def test_padding_under_a_mask_is_not_checked() -> None:
    check_token_ids(np.array([3, 4]), 5)
    with pytest.raises(
        BadInputError, match=r"\[0, 4\] \(the model's vocabulary of 5\), received 5"
    ):
        check_token_ids(np.array([[3, 5]]), 5)


def test_a_training_batch_past_the_context_is_named() -> None:
    check_context(8, 0, 8, "CausalLM")
    with pytest.raises(
        BadInputError, match=r"CausalLM: .* context length of 8 positions, received 9"
    ):
        check_context(9, 0, 8, "CausalLM")
    check_context(100, 100, None)
