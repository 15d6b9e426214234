"""Importer registrations for TfIdfVectorizer and com.microsoft Tokenizer: see
sonnx.operators.text.features."""

from sonnx.onnx.registry import register_operators
from sonnx.operators.text.features import TfIdfVectorizer, Tokenizer

register_operators(TfIdfVectorizer, Tokenizer)
