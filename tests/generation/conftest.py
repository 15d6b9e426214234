"""One tiny llama, exported once per session as an optimum-style directory with a tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.generation.optimum_models import export_optimum_style, tiny_llama, word_tokenizer


@pytest.fixture(scope="session")
def llama():
    return tiny_llama()


@pytest.fixture(scope="session")
def llama_dir(llama, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = export_optimum_style(llama, tmp_path_factory.mktemp("llama"))
    word_tokenizer(llama.config.vocab_size).save(str(root / "tokenizer.json"))
    return root


@pytest.fixture(scope="session")
def llama_rep(llama_dir: Path):
    import sonnx

    return sonnx.prepare(str(llama_dir / "model.onnx"))
