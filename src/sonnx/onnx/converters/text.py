"""Importer registrations for TfIdfVectorizer and com.microsoft Tokenizer: see
sonnx.autograd.text."""

from sonnx.autograd.text import TfIdfVectorizer, Tokenizer
from sonnx.onnx.registry import register_operator

register_operator(TfIdfVectorizer, 9)
register_operator(Tokenizer, 1)
