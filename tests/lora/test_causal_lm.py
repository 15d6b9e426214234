"""CausalLM: the prefill feeds of a genai build, the next-token loss, left-padded batches that
train as each sequence alone, and its typed errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sonnx import autograd, opt
from sonnx.errors import BadInputError
from sonnx.lora import CausalLM
from sonnx.lora.causal_lm import IGNORE_INDEX, next_token_loss
from sonnx.tensor import Tensor, to_numpy
from tests.genai_builds import HEAD_DIM, KV_HEADS, build, hf_model
from tests.generation.optimum_models import export_optimum_style, tiny_llama


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


PROMPTS = [[1, 5, 6], [1, 8, 9, 10, 11, 12], [1, 20, 21, 22]]


@pytest.fixture(scope="module", params=["genai", "optimum"])
def causal_lm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """GroupQueryAttention (right-padded inside) and optimum's concatenating attention."""
    if request.param == "genai":
        return CausalLM(build("llama", "fp32"))
    folder = export_optimum_style(tiny_llama(), tmp_path_factory.mktemp("llama"))
    return CausalLM(folder / "model.onnx", head_size=16)


def left_padded(prompts: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(p) for p in prompts)
    ids = np.zeros((len(prompts), width), np.int64)
    mask = np.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - len(p) :], mask[b, width - len(p) :] = p, 1
    return ids, mask


def test_a_left_padded_batch_trains_as_each_sequence_alone(causal_lm) -> None:
    ids, mask = left_padded(PROMPTS)
    labels = np.where(mask == 1, ids, 7)  # what a label on padding holds must not count
    logits = to_numpy(causal_lm.forward(ids, mask))
    alone_losses, counts = [], []
    for b, prompt in enumerate(PROMPTS):
        alone = causal_lm.forward(np.array([prompt]))
        np.testing.assert_allclose(logits[b, -len(prompt) :], to_numpy(alone)[0], atol=1e-5)
        alone_losses.append(float(to_numpy(next_token_loss(alone, np.array([prompt])))))
        counts.append(len(prompt) - 1)
    expected = np.average(alone_losses, weights=counts)  # the batch's mean over its tokens
    causal_lm.set_optimizer(opt.SGD(lr=0.01))
    previous = autograd.training
    causal_lm.train()
    try:
        _, loss = causal_lm.train_one_batch(ids, labels, attention_mask=mask)
    finally:
        autograd.training = previous
    np.testing.assert_allclose(float(to_numpy(loss)), expected, rtol=1e-5, atol=1e-5)


def test_a_mask_with_padding_inside_a_row_is_refused(causal_lm) -> None:
    ids = np.array([[1, 5, 6, 7]])
    with pytest.raises(BadInputError, match=r"row 0: \[1, 0, 1, 1\]"):
        causal_lm.forward(ids, np.array([[1, 0, 1, 1]]))
    with pytest.raises(BadInputError, match=r"input ids' shape \(1, 4\), received \(1, 3\)"):
        causal_lm.forward(ids, np.array([[1, 1, 1]]))
