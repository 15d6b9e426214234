"""Tiny random-weight LLMs written by onnxruntime-genai's model builder, for tests.

Each family (llama, qwen2, phi3, gemma, mistral) is a Hugging Face config shrunk to two layers
of width 64 (4 query heads over 2 KV heads, so GroupQueryAttention's head sharing is exercised),
initialised with a fixed seed and saved with ``save_pretrained`` beside a byte-level BPE
tokenizer trained here on a few sentences. ``build(family, precision)`` runs the builder on that
directory (``fp32`` or ``int4``, CPU) and returns the output directory: ``model.onnx``,
``genai_config.json`` and the tokenizer files, a model ``onnxruntime_genai.Model`` opens as is.

Everything is made once per process, in one temporary directory removed at exit: the first
call for a family and precision takes a few seconds, later ones return the cached path. The
fixtures at the end hand the same functions to pytest tests.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import logging
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

FAMILIES = ("llama", "qwen2", "phi3", "gemma", "mistral")
PRECISIONS = ("fp32", "int4")

#: The special tokens, in id order: the tokenizer gives them ids 0, 1, 2.
UNK, BOS, EOS = "<unk>", "<s>", "</s>"
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2

#: What the tokenizer learns its merges from (and what tests may use as prompts).
SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "hello world, this is a tiny language model",
    "once upon a time there was a small onnx graph",
    "sonnx runs what onnxruntime genai writes",
)

#: Shape shared by every family: tiny, with grouped-query attention (4 query heads, 2 KV heads).
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, MLP = 64, 2, 4, 2, 16, 128
CONTEXT = 128
#: Mistral's sliding window, short enough that a test prompt crosses it. onnxruntime-genai 0.18
#: sizes a windowed model's cache to the window plus 16 positions while the builder's graph
#: keeps every position, so its Generator fails past ``MISTRAL_WINDOW + 16`` tokens in all.
MISTRAL_WINDOW = 48
SEED = 0


@functools.cache
def _root() -> Path:
    """The process's build directory, removed when the process exits."""
    root = Path(tempfile.mkdtemp(prefix="sonnx-genai-builds-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


@functools.cache
def _tokenizer():
    """A byte-level BPE tokenizer (every string encodes) trained on :data:`SENTENCES`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=[UNK, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(SENTENCES, trainer)
    return tokenizer


def vocab_size() -> int:
    """The tokenizer's vocabulary size, which is every family's ``vocab_size``."""
    return _tokenizer().get_vocab_size()


def _config(family: str):
    """The tiny transformers config of ``family``."""
    import transformers

    common = dict(
        vocab_size=vocab_size(),
        hidden_size=HIDDEN,
        intermediate_size=MLP,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=CONTEXT,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=EOS_ID,
        tie_word_embeddings=False,
    )
    if family == "llama":
        return transformers.LlamaConfig(**common)
    if family == "qwen2":
        return transformers.Qwen2Config(**common)
    if family == "phi3":
        # Equal context lengths select the builder's plain (not LongRoPE) Phi-3.
        return transformers.Phi3Config(**common, original_max_position_embeddings=CONTEXT)
    if family == "gemma":
        # Gemma ties its head to the embedding and sets its head size apart from hidden/heads.
        return transformers.GemmaConfig(
            **{**common, "tie_word_embeddings": True},
            head_dim=HEAD_DIM,
            hidden_activation="gelu_pytorch_tanh",
        )
    if family == "mistral":
        return transformers.MistralConfig(**common, sliding_window=MISTRAL_WINDOW)
    raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")


def hf_model_dir(family: str) -> Path:
    """The Hugging Face directory of ``family`` (config.json, safetensors weights seeded from
    :data:`SEED`, tokenizer files), written on the first call."""
    return _hf_model_dir(family)


@functools.cache
def _hf_model_dir(family: str) -> Path:
    import transformers

    out = _root() / "hf" / family
    config = _config(family)
    with torch.random.fork_rng(devices=[]):
        # One seed per family, so llama and mistral (the same layers) differ in weights.
        torch.manual_seed(SEED + FAMILIES.index(family))
        model = transformers.AutoModelForCausalLM.from_config(config)
        _perturb_norms_and_biases(model)
    model.save_pretrained(out)
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=_tokenizer(), bos_token=BOS, eos_token=EOS, unk_token=UNK
    ).save_pretrained(out)
    return out


def _perturb_norms_and_biases(model: torch.nn.Module) -> None:
    """Move the norm weights and biases off the constants transformers initialises them to
    (ones or zeros), as training does: a test then sees them applied, and a quantized
    embedding normalised by unit weights no longer puts int8 rounding exactly on its ties
    (where float rounding alone would decide between two runtimes)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.empty_like(p).uniform_(-0.5, 0.5))
            elif name.endswith("bias"):
                p.normal_(0.0, 0.02)


def hf_model(family: str):
    """The transformers model of ``family`` with the weights its builds were made from, in eval
    mode (a reference for logits, generation and PEFT)."""
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(hf_model_dir(family)).eval()


def build(family: str, precision: str) -> Path:
    """The directory onnxruntime-genai's model builder writes for ``family`` at ``precision``
    (``fp32`` or ``int4``, CPU execution provider), built on the first call."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    return _build(family, precision)


@functools.cache
def _build(family: str, precision: str) -> Path:
    from onnxruntime_genai.models.builder import create_model, parse_extra_options

    source = str(hf_model_dir(family))
    out = str(_root() / f"{family}-{precision}")
    cache = str(_root() / "builder-cache")
    # The builder prints every tensor it saves and logs every node it quantizes.
    quantizer_log = logging.getLogger("onnxruntime.quantization")
    level = quantizer_log.level
    quantizer_log.setLevel(logging.WARNING)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            options = parse_extra_options("", source, out, precision, "cpu", cache, [])
            create_model("", source, out, precision, "cpu", cache, **options)
    except Exception as e:
        raise RuntimeError(
            f"onnxruntime-genai's builder failed on {family} {precision}: {e}; its last "
            f"output:\n{printed.getvalue()[-2000:]}"
        ) from e
    finally:
        quantizer_log.setLevel(level)
    return Path(out)


@pytest.fixture(scope="session")
def genai_build():
    """``genai_build(family, precision) -> Path``: :func:`build` as a fixture."""
    return build


@pytest.fixture(scope="session")
def genai_hf_model_dir():
    """``genai_hf_model_dir(family) -> Path``: :func:`hf_model_dir` as a fixture."""
    return hf_model_dir


def unbudgeted_graph_decoder(model_dir: Path):
    """The decoder in ``model_dir`` in graph mode without a compile budget, for tests that
    count compiled graphs: a slow or loaded machine must not leave one eager by spending the
    default budget."""
    import sonnx
    from sonnx.generation import load_decoder
    from sonnx.generation.model_dir import decoder_file

    rep = sonnx.prepare(str(decoder_file(model_dir)), use_graph=True, compile_budget=None)
    return load_decoder(model_dir, rep=rep)
