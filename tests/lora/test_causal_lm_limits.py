"""CausalLM refuses float ids, ids outside the vocabulary and sequences past the context
before running (issue 47 items 9 and 18)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from sonnx import opt
from sonnx.errors import BadInputError
from sonnx.lora import CausalLM
from sonnx.testing.gqa_decoder import GENAI_CONFIG, MAX_POSITIONS, VOCAB, gqa_decoder


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> CausalLM:
    root = tmp_path_factory.mktemp("gqa")
    onnx.save(gqa_decoder(), str(root / "model.onnx"))
    config = json.loads(json.dumps(GENAI_CONFIG))
    config["model"]["decoder"]["filename"] = "model.onnx"
    (root / "genai_config.json").write_text(json.dumps(config))
    lm = CausalLM(Path(root))
    lm.set_optimizer(opt.SGD(lr=0.01))
    return lm


def test_a_sequence_longer_than_the_context_is_refused(model: CausalLM) -> None:
    ids = np.ones((1, MAX_POSITIONS + 1), np.int64)
    with pytest.raises(BadInputError, match=f"context length of {MAX_POSITIONS} positions"):
        model.train_one_batch(ids, ids)


def test_float_ids_and_ids_past_the_vocabulary_are_refused(model: CausalLM) -> None:
    with pytest.raises(BadInputError, match="CausalLM: token ids must be integers"):
        model.train_one_batch(np.ones((1, 4), np.float32), np.ones((1, 4), np.int64))
    ids = np.array([[1, 2, VOCAB]])
    with pytest.raises(BadInputError, match=f"received {VOCAB}"):
        model.train_one_batch(ids, ids)
    assert model.forward(ids - 1).shape == (1, 3, VOCAB)  # in range: runs
