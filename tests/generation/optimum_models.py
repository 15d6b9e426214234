"""Tiny random-weight transformers decoders exported the way optimum writes them, and a
word-level tokenizer for their vocabulary.

The graph takes ``input_ids``, ``attention_mask``, ``position_ids`` and
``past_key_values.N.key``/``.value`` (batch, kv heads, past length, head size) and returns
``logits`` and ``present.N.key``/``.value``, with dynamic batch, sequence and past lengths.
The eager attention is exported (not SDPA), so no trace-time branch on the sequence length
ends up baked into the graph.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import DynamicCache


def tiny_llama(seed: int = 0, vocab: int = 96) -> LlamaForCausalLM:
    """A two-layer llama with grouped-query attention (4 heads, 2 kv heads, head size 16)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    model = LlamaForCausalLM(config).eval()
    # Wider random weights than the default init, so the tokens chosen differ from step to step.
    with torch.no_grad():
        model.lm_head.weight.mul_(20)
    return model


def word_tokenizer(vocab: int):
    """A word-level tokenizer over ``<unk>``, ``<s>``, ``</s>`` and the words ``w3`` .. ``wN``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab)}}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tokenizer


class _WithFlatCache(torch.nn.Module):
    """The model with its cache as flat tensors in and out, the signature optimum exports."""

    def __init__(self, model: LlamaForCausalLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, *past):
        cache = DynamicCache(config=self.model.config)
        for i in range(len(past) // 2):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


def export_optimum_style(model: LlamaForCausalLM, out_dir: Path) -> Path:
    """``out_dir/model.onnx`` and ``config.json``; returns ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config = model.config
    layers, kv_heads = config.num_hidden_layers, config.num_key_value_heads
    head_size = config.hidden_size // config.num_attention_heads
    batch, seq, past = 2, 3, 4
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    mask = torch.ones(batch, past + seq, dtype=torch.int64)
    positions = torch.arange(past, past + seq).expand(batch, seq)
    pasts = [torch.randn(batch, kv_heads, past, head_size) for _ in range(2 * layers)]
    names, outputs = [], ["logits"]
    dynamic = {
        "input_ids": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "sequence"},
        "logits": {0: "batch", 1: "sequence"},
    }
    for i in range(layers):
        for kind in ("key", "value"):
            names.append(f"past_key_values.{i}.{kind}")
            outputs.append(f"present.{i}.{kind}")
            dynamic[names[-1]] = {0: "batch", 2: "past"}
            dynamic[outputs[-1]] = {0: "batch", 2: "total"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _WithFlatCache(model),
            (ids, mask, positions, *pasts),
            str(out_dir / "model.onnx"),
            input_names=["input_ids", "attention_mask", "position_ids", *names],
            output_names=outputs,
            dynamic_axes=dynamic,
            opset_version=17,
            dynamo=False,
        )
    (out_dir / "config.json").write_text(json.dumps(config.to_dict()))
    return out_dir
