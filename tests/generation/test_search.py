"""The decode loop against transformers' own ``generate`` on the model it was exported from."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sonnx.errors import BadInputError, BadModelError

PROMPT = [1, 5, 9, 33, 7]


def reference(llama, prompt: list[int], **options) -> np.ndarray:
    options.setdefault("eos_token_id", None)
    with torch.no_grad():
        out = llama.generate(torch.tensor([prompt]), do_sample=False, pad_token_id=0, **options)
    return out.numpy()


def test_greedy_equals_transformers_32_tokens(llama, llama_rep) -> None:
    expected = reference(llama, PROMPT, max_new_tokens=32)
    out = llama_rep.generate(PROMPT, max_new_tokens=32)
    assert out.shape == (1, len(PROMPT) + 32)
    np.testing.assert_array_equal(out, expected)


def test_end_token_stops_as_in_transformers(llama, llama_rep) -> None:
    unended = llama_rep.generate(PROMPT, max_new_tokens=16)[0, len(PROMPT) :]
    end = int(unended[6])  # a token greedy decoding reaches after a few steps
    expected = reference(llama, PROMPT, max_new_tokens=16, eos_token_id=end)
    out = llama_rep.generate(PROMPT, max_new_tokens=16, eos_token_id=end)
    np.testing.assert_array_equal(out, expected)
    assert out.shape[1] < len(PROMPT) + 16 and out[0, -1] == end


@pytest.mark.parametrize("end", [None, 36, 90])
def test_beam_search_equals_transformers(llama, llama_rep, end: int | None) -> None:
    """Without an end token, and with end tokens that finish hypotheses early and late."""
    expected = reference(llama, PROMPT, max_new_tokens=12, num_beams=3, eos_token_id=end)
    got = llama_rep.generate(PROMPT, max_new_tokens=12, num_beams=3, eos_token_id=end)
    np.testing.assert_array_equal(got, expected)


def test_left_padded_batch_equals_each_prompt_alone(llama_rep) -> None:
    prompts = [PROMPT, [1, 4], [1, 8, 8, 3]]
    batch = llama_rep.generate(prompts, max_new_tokens=12)
    assert batch.shape == (3, 5 + 12)
    for row, prompt in zip(batch, prompts, strict=True):
        alone = llama_rep.generate(prompt, max_new_tokens=12)[0]
        np.testing.assert_array_equal(row[-12:], alone[-12:])
        np.testing.assert_array_equal(row[5 - len(prompt) : 5], prompt)


def test_explicit_attention_mask_equals_padding_done_here(llama_rep) -> None:
    ids = np.array([[0, 0, 1, 4], [1, 8, 8, 3]])
    mask = np.array([[0, 0, 1, 1], [1, 1, 1, 1]])
    out = llama_rep.generate(ids, max_new_tokens=6, attention_mask=mask)
    np.testing.assert_array_equal(out, llama_rep.generate([[1, 4], [1, 8, 8, 3]], max_new_tokens=6))


def test_seeded_sampling_is_reproducible(llama_rep) -> None:
    options = {"max_new_tokens": 16, "do_sample": True, "temperature": 1.5, "top_k": 20}
    first = llama_rep.generate(PROMPT, seed=7, **options)
    np.testing.assert_array_equal(first, llama_rep.generate(PROMPT, seed=7, **options))
    assert not np.array_equal(first, llama_rep.generate(PROMPT, seed=8, **options))


def test_sampling_from_the_top_token_only_is_greedy(llama_rep) -> None:
    greedy = llama_rep.generate(PROMPT, max_new_tokens=8)
    np.testing.assert_array_equal(
        llama_rep.generate(PROMPT, max_new_tokens=8, do_sample=True, top_k=1, seed=0), greedy
    )
    np.testing.assert_array_equal(
        llama_rep.generate(PROMPT, max_new_tokens=8, do_sample=True, top_p=1e-6, seed=0), greedy
    )


def test_streamer_sees_every_new_token_in_order(llama_rep) -> None:
    seen: list[np.ndarray] = []
    out = llama_rep.generate([PROMPT, [1, 4]], max_new_tokens=5, streamer=seen.append)
    np.testing.assert_array_equal(np.stack(seen, 1), out[:, -5:])


def test_bad_arguments_are_typed_errors(llama_rep) -> None:
    with pytest.raises(BadInputError, match="temperature"):
        llama_rep.generate(PROMPT, do_sample=True, temperature=0)
    with pytest.raises(BadInputError, match="max_new_tokens"):
        llama_rep.generate(PROMPT, max_new_tokens=0)
    with pytest.raises(BadInputError, match="left"):
        llama_rep.generate([[1, 4, 0]], attention_mask=[[1, 1, 0]])
    with pytest.raises(BadInputError, match="beam search"):
        llama_rep.generate(PROMPT, num_beams=2, do_sample=True)


def test_a_model_without_a_cache_is_refused(tmp_path) -> None:
    from onnx import TensorProto, helper

    import sonnx

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    rep = sonnx.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(BadModelError, match="past_key_values"):
        rep.generate([1, 2])
