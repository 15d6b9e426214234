"""Generation for decoder-only ONNX models with a KV cache (onnxruntime-genai's and optimum's
layouts): :meth:`SingaRep.generate` on a prepared graph, :func:`generate` on a model directory.
"""

from sonnx.generation.cache_layout import CacheLayout, detect_layout
from sonnx.generation.model_dir import DecoderModel, generate, load_decoder
from sonnx.generation.sampling import Sampling
from sonnx.generation.search import generate_tokens
from sonnx.generation.text import TextStreamer, Tokenizer, load_tokenizer

__all__ = [
    "CacheLayout",
    "DecoderModel",
    "Sampling",
    "TextStreamer",
    "Tokenizer",
    "detect_layout",
    "generate",
    "generate_tokens",
    "load_decoder",
    "load_tokenizer",
]
