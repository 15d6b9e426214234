"""Importer registrations for the ai.onnx.ml operators: see sonnx.autograd.ml."""

from sonnx.autograd.ml import ML_DOMAIN, ArrayFeatureExtractor, Binarizer, TreeEnsemble
from sonnx.onnx.registry import register_operator

register_operator(ArrayFeatureExtractor, 1, domain=ML_DOMAIN)
register_operator(Binarizer, 1, domain=ML_DOMAIN)
register_operator(TreeEnsemble, 5, domain=ML_DOMAIN)
