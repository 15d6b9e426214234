"""The decode step over a shared cache buffer, eager and in graph mode.

onnxruntime-genai's builds share past and present (``past_present_share_buffer``):
:class:`~sonnx.generation.decoder.Decoder` feeds one buffer of the maximum length per layer and
GroupQueryAttention writes each step's rows into it, so every decode step has the same shapes
and graph mode compiles one graph for the prompt and one for all decode steps.
"""

from __future__ import annotations

import numpy as np
import torch

from sonnx.generation import load_decoder
from sonnx.generation.decoder import Decoder, last_logits, tokens_first
from tests.genai_builds import SENTENCES, build


def test_a_shared_buffer_is_written_in_place_and_is_the_present() -> None:
    model = load_decoder(build("llama", "fp32"))
    decoder = Decoder(model.rep, model.layout)
    ids = torch.tensor([model.tokenizer.encode(SENTENCES[0])])
    cache = decoder.empty_cache(1, ids.shape[1] + 4)
    mask, positions = torch.ones_like(ids), torch.arange(ids.shape[1])[None]
    _, present = decoder.step(ids, mask, positions, cache)
    for before, after in zip(cache.keys + cache.values, present.keys + present.values, strict=True):
        assert after is before
        assert after[:, :, : ids.shape[1]].abs().sum() > 0 and not after[:, :, ids.shape[1] :].any()


def test_graph_mode_decode_compiles_once_for_every_length() -> None:
    """Greedy tokens equal eager's for one prompt and for a left-padded batch of two (more
    new tokens: other lengths and buffer sizes), from two compiled graphs in all (the prompt's
    and the decode step's), with no step run eagerly."""
    model_dir = build("llama", "fp32")
    eager, graph = load_decoder(model_dir), load_decoder(model_dir, use_graph=True)
    prompts = [eager.tokenizer.encode(s) for s in SENTENCES[:2]]
    for batch, new in (([prompts[0]], 5), (prompts, 9)):
        expected = eager.generate(batch, max_new_tokens=new, eos_token_id=None)
        got = graph.generate(batch, max_new_tokens=new, eos_token_id=None)
        np.testing.assert_array_equal(got, expected)
    runner = graph.running_rep.graph_runner
    assert runner.compile_count == 2
    assert runner.fallback is None and all(part.compiled for part in runner.parts())


def test_last_logits_takes_each_rows_last_token_as_float32() -> None:
    logits = torch.arange(2 * 3 * 4, dtype=torch.float16).reshape(2, 3, 4)
    final = last_logits(logits)
    assert final.dtype == torch.float32
    torch.testing.assert_close(final, logits[:, 2].float())
    # right padding: row 0's last token is at 0, row 1's at 2
    torch.testing.assert_close(
        last_logits(logits, torch.tensor([0, 2])), torch.stack([logits[0, 0], logits[1, 2]]).float()
    )
    # a graph that returns the last position's logits only
    torch.testing.assert_close(last_logits(logits[:, 1]), logits[:, 1].float())


def test_tokens_first_moves_each_rows_padding_after_its_tokens_in_order() -> None:
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]])
    ids = torch.tensor([[9, 9, 5, 6], [1, 2, 3, 4], [7, 8, 9, 9]])
    order = tokens_first(mask)
    assert ids.gather(1, order).tolist() == [[5, 6, 9, 9], [1, 2, 3, 4], [7, 8, 9, 9]]
    assert mask.gather(1, order).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]]
