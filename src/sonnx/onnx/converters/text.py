"""Importer registrations for TfIdfVectorizer and com.microsoft Tokenizer: see
sonnx.operators.text.features."""

from sonnx.onnx.registry import register_operator
from sonnx.operators.text.features import TfIdfVectorizer, Tokenizer

register_operator(TfIdfVectorizer, 9)
register_operator(Tokenizer, 1)
