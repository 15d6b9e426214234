"""CausalLM: the prefill feeds of a genai build, the next-token loss, and its typed errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sonnx.errors import BadInputError
from sonnx.lora import CausalLM
from sonnx.lora.causal_lm import IGNORE_INDEX, next_token_loss
from sonnx.tensor import Tensor, to_numpy
from tests.genai_builds import HEAD_DIM, KV_HEADS, build, hf_model


def test_feeds_are_a_prefill_with_empty_caches_and_match_transformers() -> None:
    model = CausalLM(build("llama", "fp32"))
    ids = np.array([[1, 5, 6, 7], [1, 8, 9, 10]])
    feeds = model.feeds(ids)
    assert feeds["past_key_values.0.key"].shape == (2, KV_HEADS, 0, HEAD_DIM)
    np.testing.assert_array_equal(feeds["attention_mask"], np.ones_like(ids))
    with torch.no_grad():
        expected = hf_model("llama")(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(to_numpy(model.forward(ids)), expected, rtol=1e-4, atol=1e-4)


def test_next_token_loss_is_shifted_cross_entropy_skipping_ignored_labels() -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 5, 7)).astype(np.float32)
    labels = rng.integers(0, 7, (2, 5))
    labels[0, :3] = IGNORE_INDEX
    got = next_token_loss(Tensor(data=logits, requires_grad=False), labels)
    expected = torch.nn.functional.cross_entropy(
        torch.from_numpy(logits[:, :-1]).reshape(-1, 7),
        torch.from_numpy(labels[:, 1:]).reshape(-1),
        ignore_index=IGNORE_INDEX,
    )
    np.testing.assert_allclose(to_numpy(got), expected.numpy(), rtol=1e-6)


def test_typed_errors(tmp_path) -> None:
    with pytest.raises(BadInputError, match=r"has no genai_config\.json"):
        CausalLM(tmp_path)
    model = CausalLM(build("llama", "fp32") / "model.onnx")
    with pytest.raises(BadInputError, match="free head size"):
        model.feeds(np.array([[1, 2]]))
    logits = Tensor(data=np.zeros((1, 3, 4), np.float32), requires_grad=False)
    with pytest.raises(BadInputError, match=r"labels must have the input ids' shape \(1, 3\)"):
        next_token_loss(logits, np.zeros((1, 2), np.int64))
    with pytest.raises(BadInputError, match="no optimizer"):
        model.train_one_batch(np.array([[1, 2]]), np.array([[1, 2]]))
