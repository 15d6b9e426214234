"""``sonnx.generate(model_dir, ...)``: a decoder model directory, from prompt to output.

A directory is either onnxruntime-genai's (``genai_config.json`` names the ONNX file, the
cache names and the end tokens) or optimum's (``model.onnx`` or ``decoder_model_merged.onnx``
with ``config.json``/``generation_config.json`` for the end tokens). With ``tokenizer.json``
beside it a prompt may be text, and text comes back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sonnx.device import Device
from sonnx.errors import BadInputError
from sonnx.generation.cache_layout import CacheLayout, detect_layout, read_genai_config
from sonnx.generation.search import generate_tokens
from sonnx.generation.text import load_tokenizer

if TYPE_CHECKING:
    from sonnx.runtime.rep import SingaRep

_OPTIMUM_FILES = ("model.onnx", "decoder_model_merged.onnx", "decoder_with_past_model.onnx")


@dataclass
class DecoderModel:
    """A loaded decoder directory: the prepared graph, its cache layout, its end tokens and
    (when the directory has one) its tokenizer."""

    rep: SingaRep
    layout: CacheLayout
    eos_token_id: list[int]
    pad_token_id: int | None
    tokenizer: Any = None

    def generate(self, input_ids: Any, **options: Any) -> np.ndarray:
        """:func:`~sonnx.generation.search.generate_tokens` with this model's end tokens and
        layout (``options`` override them)."""
        options.setdefault("eos_token_id", self.eos_token_id or None)
        options.setdefault("pad_token_id", self.pad_token_id)
        options.setdefault("layout", self.layout)
        return generate_tokens(self.rep, input_ids, **options)


def decoder_file(model_dir: str | Path) -> Path:
    """The ONNX file of the decoder in ``model_dir`` (``genai_config.json``'s, else optimum's)."""
    root = Path(model_dir)
    if not root.is_dir():
        raise BadInputError(f"generate: {model_dir} is not a directory")
    config = read_genai_config(root)
    if config is not None:
        return root / config["model"]["decoder"].get("filename", "model.onnx")
    found = [root / f for f in _OPTIMUM_FILES if (root / f).is_file()]
    if not found:
        raise BadInputError(
            f"generate: {model_dir} has neither genai_config.json nor one of {_OPTIMUM_FILES}"
        )
    return found[0]


def load_decoder(
    model_dir: str | Path,
    device: Device | str | None = None,
    use_graph: bool = False,
    rep: SingaRep | None = None,
) -> DecoderModel:
    """Prepare the decoder in ``model_dir`` (see the module docstring for what it may hold).

    ``rep``: :func:`decoder_file` already prepared (a server shares the graph that answers its
    inference requests), used as it is instead of preparing the file again.
    """
    from sonnx.runtime.rep import prepare

    root = Path(model_dir)
    model = decoder_file(root)
    config = read_genai_config(root)
    if config is not None:
        ends = config["model"].get("eos_token_id")
        pad = config["model"].get("pad_token_id")
    else:
        ends, pad = _hf_end_tokens(root)
    if rep is None:
        rep = prepare(str(model), device=device, use_graph=use_graph)
    tokenizer = load_tokenizer(root) if (root / "tokenizer.json").is_file() else None
    ends = [] if ends is None else [ends] if isinstance(ends, int) else list(ends)
    return DecoderModel(rep, detect_layout(rep, config), ends, pad, tokenizer)


def generate(
    model_dir: str | Path, prompt: str | list[str] | Any = None, **options: Any
) -> str | list[str] | np.ndarray:
    """Generate from the decoder in ``model_dir``.

    ``prompt`` is text (or a list of texts) where the directory has ``tokenizer.json``, and
    the generated text comes back; token ids give token ids back (prompt and continuation, as
    :meth:`SingaRep.generate`). ``options`` are :meth:`SingaRep.generate`'s, plus ``device``
    and ``use_graph`` for :func:`sonnx.prepare`.
    """
    device, use_graph = options.pop("device", None), options.pop("use_graph", False)
    model = load_decoder(model_dir, device=device, use_graph=use_graph)
    texts = [prompt] if isinstance(prompt, str) else prompt
    if not (isinstance(texts, list) and texts and all(isinstance(t, str) for t in texts)):
        return model.generate(prompt, **options)
    if model.tokenizer is None:
        raise BadInputError(f"generate: {model_dir} has no tokenizer.json to encode text with")
    ids = [model.tokenizer.encode(t).ids for t in texts]
    out = model.generate(ids, **options)
    width = max(len(i) for i in ids)
    decode = model.tokenizer.decode
    decoded = [decode(row[width:].tolist(), skip_special_tokens=True) for row in out]
    return decoded[0] if isinstance(prompt, str) else decoded


def _hf_end_tokens(root: Path) -> tuple[Any, int | None]:
    """End and pad ids from transformers' ``generation_config.json`` or ``config.json``."""
    for name in ("generation_config.json", "config.json"):
        path = root / name
        if path.is_file():
            data = json.loads(path.read_text())
            if data.get("eos_token_id") is not None:
                return data["eos_token_id"], data.get("pad_token_id")
    return None, None
