"""The hand-written GroupQueryAttention decoder at other sizes (layers, MLP) runs in onnxruntime
as in sonnx, and its genai config names every layer's cache."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

import sonnx
from sonnx.generation import detect_layout
from sonnx.generation.decode_steps import static_shapes
from sonnx.testing.gqa_decoder import GqaSizes, genai_config, gqa_decoder

SIZES = GqaSizes(layers=2, hidden=64, heads=4, kv_heads=2, head_size=16, vocab=96, ffn=128)


def _prompt_feeds(batch: int, length: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    empty = np.zeros((batch, SIZES.kv_heads, 0, SIZES.head_size), np.float32)
    feeds = {
        "input_ids": rng.integers(0, SIZES.vocab, (batch, length)),
        "attention_mask": np.ones((batch, length), np.int64),
    }
    for i in range(SIZES.layers):
        feeds[f"past_key_values.{i}.key"] = feeds[f"past_key_values.{i}.value"] = empty
    return feeds


def test_a_two_layer_decoder_with_an_mlp_runs_as_in_onnxruntime() -> None:
    model = gqa_decoder(seed=3, sizes=SIZES)
    feeds = _prompt_feeds(batch=2, length=5)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    got = sonnx.prepare(model).run(feeds)
    assert len(got) == len(expected) == 1 + 2 * SIZES.layers
    assert expected[0].shape == (2, 5, SIZES.vocab)
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(ours.data.numpy(), theirs, rtol=1e-4, atol=1e-4)


def test_the_genai_config_gives_a_shared_buffer_layout_over_every_layer() -> None:
    rep = sonnx.prepare(gqa_decoder(sizes=SIZES))
    config = genai_config(SIZES.layers, True, SIZES.kv_heads, SIZES.head_size)
    layout = detect_layout(rep, config)
    assert static_shapes(layout)  # decoded at one shape, as generate(cuda_graph=True) needs
    assert layout.past_keys == ("past_key_values.0.key", "past_key_values.1.key")
    assert layout.past_values == ("past_key_values.0.value", "past_key_values.1.value")
