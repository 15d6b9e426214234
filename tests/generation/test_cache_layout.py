"""Cache layout detection from optimum's names and from a genai_config.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

import sonnx
from sonnx.errors import BadModelError
from sonnx.generation.cache_layout import detect_layout, read_genai_config
from sonnx.testing.gqa_decoder import GENAI_CONFIG, genai_config, gqa_decoder


def test_optimum_names_give_the_layout(llama_rep) -> None:
    layout = detect_layout(llama_rep)
    assert layout.layers == 2 and (layout.kv_heads, layout.head_size) == (2, 16)
    assert layout.past_keys == ("past_key_values.0.key", "past_key_values.1.key")
    assert layout.present_values == ("present.0.value", "present.1.value")
    assert (layout.attention_mask, layout.position_ids) == ("attention_mask", "position_ids")
    assert layout.cache_dtype == torch.float32 and not layout.share_buffer
    assert not layout.right_padded  # the export's attention is plain MatMul and Softmax


def test_a_genai_config_names_the_same_tensors(llama_rep, tmp_path: Path) -> None:
    config = genai_config(layers=2, share_buffer=False)
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    assert detect_layout(llama_rep, read_genai_config(tmp_path)) == detect_layout(llama_rep)


def test_a_config_naming_missing_inputs_is_refused(llama_rep) -> None:
    config = genai_config(layers=2, share_buffer=False)
    config["model"]["decoder"]["inputs"]["past_key_names"] = "past.%d.k"
    with pytest.raises(BadModelError, match=r"past\.0\.k"):
        detect_layout(llama_rep, config)
    del config["model"]["decoder"]["outputs"]
    with pytest.raises(BadModelError, match="outputs"):
        detect_layout(llama_rep, config)


def test_no_config_is_none_and_a_broken_one_an_error(tmp_path: Path) -> None:
    assert read_genai_config(tmp_path) is None
    (tmp_path / "genai_config.json").write_text("{")
    with pytest.raises(BadModelError, match="JSON"):
        read_genai_config(tmp_path)


def test_a_rep_prepared_from_a_genai_directorys_file_reads_its_config(tmp_path: Path) -> None:
    """``prepare("dir/model.onnx").generate(...)`` finds the layout in the genai_config.json
    beside the file (here past inputs named ``past.N.k``/``.v``, which optimum's names are
    not), as ``sonnx.generation.generate`` on the directory does."""
    model = gqa_decoder()
    renames = {f"past_key_values.0.{kind}": f"past.0.{kind[0]}" for kind in ("key", "value")}
    for value in model.graph.input:
        value.name = renames.get(value.name, value.name)
    for node in model.graph.node:
        node.input[:] = [renames.get(name, name) for name in node.input]
    onnx.save(model, tmp_path / "model.onnx")
    prompt = np.array([[3, 1, 4, 1]], np.int64)
    with pytest.raises(BadModelError, match="optimum's layout"):
        sonnx.prepare(tmp_path / "model.onnx").generate(prompt, max_new_tokens=3)
    config = json.loads(json.dumps(GENAI_CONFIG))
    names = config["model"]["decoder"]["inputs"]
    names["past_key_names"], names["past_value_names"] = "past.%d.k", "past.%d.v"
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    got = sonnx.prepare(tmp_path / "model.onnx").generate(prompt, max_new_tokens=3)
    expected = sonnx.prepare(gqa_decoder()).generate(
        prompt, max_new_tokens=3, layout=detect_layout(sonnx.prepare(gqa_decoder()), GENAI_CONFIG)
    )
    np.testing.assert_array_equal(got, expected)
