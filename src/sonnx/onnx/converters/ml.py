"""Importer registrations for the ai.onnx.ml operators: see sonnx.autograd.ml, ml_linear,
ml_svm and ml_trees. ZipMap, whose output is a sequence of maps rather than a tensor, is a
converter function here."""

from __future__ import annotations

from typing import Any

from sonnx.autograd.ml import ML_DOMAIN, ArrayFeatureExtractor, Binarizer, TreeEnsemble
from sonnx.autograd.ml_linear import (
    FeatureVectorizer,
    Imputer,
    LinearClassifier,
    LinearRegressor,
    Normalizer,
    OneHotEncoder,
    Scaler,
)
from sonnx.autograd.ml_svm import SVMClassifier, SVMRegressor
from sonnx.autograd.ml_trees import TreeEnsembleClassifier, TreeEnsembleRegressor
from sonnx.errors import BadInputError
from sonnx.onnx.registry import NodeInfo, converter, register_operator
from sonnx.onnx.values import MapSequence
from sonnx.tensor import Tensor

register_operator(ArrayFeatureExtractor, 1, domain=ML_DOMAIN)
register_operator(Binarizer, 1, domain=ML_DOMAIN)
register_operator(TreeEnsemble, 5, domain=ML_DOMAIN)
for _op in (
    FeatureVectorizer,
    Imputer,
    LinearClassifier,
    LinearRegressor,
    Normalizer,
    OneHotEncoder,
    Scaler,
    SVMClassifier,
    SVMRegressor,
):
    register_operator(_op, 1, domain=ML_DOMAIN)
register_operator(TreeEnsembleClassifier, 1, 3, domain=ML_DOMAIN)
register_operator(TreeEnsembleRegressor, 1, 3, domain=ML_DOMAIN)


@converter("ZipMap", 1, domain=ML_DOMAIN)
def ZipMap(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> MapSequence:
    """Each row of X (N, C) float32 as a dict {class label: score}, like onnxruntime."""
    ints, strings = attrs.get("classlabels_int64s"), attrs.get("classlabels_strings")
    labels = list(strings) if strings else [int(v) for v in ints or []]
    x = inputs[0].data
    if x.dim() == 1:
        x = x.reshape(1, -1)
    if x.dim() != 2 or x.shape[1] != len(labels):
        raise BadInputError(
            f"ZipMap {node.name!r}: input X must be (N, {len(labels)}), one column per class "
            f"label, received shape {tuple(x.shape)}"
        )
    rows = x.detach().to("cpu", dtype=x.dtype).tolist()  # host: the maps are Python values
    return MapSequence([dict(zip(labels, row, strict=True)) for row in rows])
