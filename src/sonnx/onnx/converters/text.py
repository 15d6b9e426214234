"""Importer registration for TfIdfVectorizer: see sonnx.autograd.text."""

from sonnx.autograd.text import TfIdfVectorizer
from sonnx.onnx.registry import register_operator

register_operator(TfIdfVectorizer, 9)
