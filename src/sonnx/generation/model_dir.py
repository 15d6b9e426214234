"""``sonnx.generate(model_dir, ...)``: a decoder model directory, from prompt to output.

A directory is either onnxruntime-genai's (``genai_config.json`` names the ONNX file, the
cache names and the end tokens) or optimum's (``model.onnx`` or ``decoder_model_merged.onnx``
with ``config.json``/``generation_config.json`` for the end tokens). With ``tokenizer.json``
beside it a prompt may be text, and text comes back.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sonnx.device import Device
from sonnx.errors import BadInputError
from sonnx.generation.cache_layout import CacheLayout, detect_layout, read_genai_config
from sonnx.generation.head_rows import head_on_kept_rows
from sonnx.generation.limits import decoder_limits
from sonnx.generation.search import generate_tokens
from sonnx.generation.text import load_tokenizer

if TYPE_CHECKING:
    from sonnx.runtime.rep import SingaRep

_OPTIMUM_FILES = ("model.onnx", "decoder_model_merged.onnx", "decoder_with_past_model.onnx")


@dataclass
class DecoderModel:
    """A loaded decoder directory: the prepared graph, its cache layout, its end tokens and
    (when the directory has one) its tokenizer. :func:`load_decoder` makes one.

    :param rep: the prepared decoder graph.
    :param layout: which of its inputs and outputs carry the tokens, the logits and the cache.
    :param eos_token_id: the token ids that end a sequence (empty: none).
    :param pad_token_id: the id that fills ended sequences and padding, or None.
    :param tokenizer: the directory's :class:`~sonnx.generation.text.Tokenizer`, or None.
    """

    rep: SingaRep
    layout: CacheLayout
    eos_token_id: list[int]
    pad_token_id: int | None
    tokenizer: Any = None

    @property
    def running_rep(self) -> SingaRep:
        """The prepared graph :meth:`generate` runs: :attr:`rep`, or its rewrite that computes
        the head on each sequence's last position only (see
        :mod:`~sonnx.generation.head_rows`), whose ``graph_runner`` and ``explain()`` tell
        what generation compiled."""
        return head_on_kept_rows(self.rep, self.layout.logits) or self.rep

    def generate(self, input_ids: Any, **options: Any) -> np.ndarray:
        """:func:`~sonnx.generation.search.generate_tokens` with this model's end tokens and
        layout (``options`` override them).

        :param input_ids: one prompt, a (batch, length) array, or a list of prompts of any lengths.
        :param options: :func:`~sonnx.generation.generate_tokens`' keyword arguments.
        :returns: the (batch, prompt length + new) int64 token ids.
        :raises BadInputError: an option or the prompt is invalid (see ``generate_tokens``).
        """
        options.setdefault("eos_token_id", self.eos_token_id or None)
        options.setdefault("pad_token_id", self.pad_token_id)
        options.setdefault("layout", self.layout)
        return generate_tokens(self.rep, input_ids, **options)


def decoder_file(model_dir: str | Path) -> Path:
    """The ONNX file of the decoder in ``model_dir`` (``genai_config.json``'s, else optimum's).

    :param model_dir: an onnxruntime-genai or optimum model directory.
    :returns: the path of its decoder's ONNX file.
    :raises BadInputError: ``model_dir`` is not a directory or holds no decoder file.
    :raises BadModelError: ``genai_config.json`` is not valid JSON.
    """
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

    :param model_dir: an onnxruntime-genai directory (``genai_config.json``) or an optimum one
        (``model.onnx`` or ``decoder_model_merged.onnx``, end tokens from ``config.json`` or
        ``generation_config.json``).
    :param device: where to run, as :func:`sonnx.prepare` takes it; None for the default.
    :param use_graph: True compiles graph mode (one graph for the prompt, one per decode step).
    :param rep: :func:`decoder_file` already prepared (a server shares the graph that answers
        its inference requests), used as it is instead of preparing the file again.
    :returns: the prepared :class:`DecoderModel`, with the tokenizer where ``tokenizer.json`` is
        beside the model.
    :raises BadInputError: ``model_dir`` is not a directory or holds no decoder file.
    :raises BadModelError: ``genai_config.json`` is not valid JSON, or the graph's inputs and
        outputs are no KV-cache layout sonnx reads.
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
    layout = detect_layout(rep, config)
    hf_config = _read_json(root / "config.json") if config is None else None
    if hf_config is not None:  # transformers' context length and vocabulary (optimum's)
        limits = decoder_limits(rep, layout.input_ids, layout.logits, hf_config=hf_config)
        layout = dataclasses.replace(layout, limits=limits)
    return DecoderModel(rep, layout, ends, pad, tokenizer)


def generate(
    model_dir: str | Path, prompt: str | list[str] | Any = None, **options: Any
) -> str | list[str] | np.ndarray:
    """Generate from the decoder in ``model_dir``.

    ``prompt`` is text (or a list of texts) where the directory has ``tokenizer.json``, and
    the generated text comes back; token ids give token ids back (prompt and continuation, as
    :meth:`SingaRep.generate`). ``options`` are :meth:`SingaRep.generate`'s, plus ``device``
    and ``use_graph`` for :func:`sonnx.prepare`.

    :param model_dir: the model directory (see :func:`load_decoder`).
    :param prompt: a text, a list of texts, or token ids (one prompt, a (batch, length) array
        or a list of prompts).
    :param options: :func:`generate_tokens`' keyword arguments (``max_new_tokens``,
        ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``num_beams``, ``seed``,
        ``streamer``, ``cuda_graph``, ...), ``device`` and ``use_graph``, and ``rep``: the
        decoder already prepared (as :func:`load_decoder` takes it; a fine-tuned one).
    :returns: the new text (a list for a list of texts), or for token ids the (batch, prompt
        length + new) int64 ids.
    :raises BadInputError: text is given and the directory has no ``tokenizer.json``, or an
        option, the prompt or the directory is invalid (see :func:`load_decoder`).
    :raises BadModelError: the model is no decoder sonnx can generate with.
    """
    device, use_graph = options.pop("device", None), options.pop("use_graph", False)
    model = load_decoder(model_dir, device, use_graph, rep=options.pop("rep", None))
    texts = [prompt] if isinstance(prompt, str) else prompt
    if not (isinstance(texts, list) and texts and all(isinstance(t, str) for t in texts)):
        return model.generate(prompt, **options)
    if model.tokenizer is None:
        raise BadInputError(f"generate: {model_dir} has no tokenizer.json to encode text with")
    ids = [model.tokenizer.encode(t) for t in texts]
    out = model.generate(ids, **options)
    width = max(len(i) for i in ids)
    decode = model.tokenizer.decode
    decoded = [decode(row[width:].tolist(), skip_special_tokens=True) for row in out]
    return decoded[0] if isinstance(prompt, str) else decoded


def _hf_end_tokens(root: Path) -> tuple[Any, int | None]:
    """End and pad ids from transformers' ``generation_config.json`` or ``config.json``."""
    for name in ("generation_config.json", "config.json"):
        data = _read_json(root / name)
        if data is not None and data.get("eos_token_id") is not None:
            return data["eos_token_id"], data.get("pad_token_id")
    return None, None


def _read_json(path: Path) -> dict[str, Any] | None:
    """``path`` parsed where it is a file holding a JSON object, else None."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else None
