"""What the ai.onnx.ml operators share: attribute reading, the feature-matrix input check,
class labels and the score post transforms as onnxruntime applies them.

The ml operators are inference operators. Those whose scores are smooth in X (LinearRegressor,
LinearClassifier's and SVMClassifier's scores, SVMRegressor, Scaler, Normalizer, Imputer,
FeatureVectorizer) let torch record the gradient with respect to X like any other operator;
the piecewise-constant ones (tree ensembles, labels, OneHotEncoder) record none, so a
``backward`` from their outputs alone reports that the loss carries no gradient graph. Their
coefficients are attributes, never trainable parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from sonnx.dtypes import dtype_name
from sonnx.engine.operator import Operator, OutputShape
from sonnx.errors import BadInputError
from sonnx.strings import StringArray, object_array

ML_DOMAIN = "ai.onnx.ml"


class MLOperator(Operator):
    """Base of the ai.onnx.ml operators: classical models that run and export, but carry no
    gradient and have no trainable weights."""

    domain = ML_DOMAIN
    output_shape = OutputShape.FROM_SHAPES
    inference_only = True


POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
FEATURE_TYPES = (torch.float32, torch.float64, torch.int32, torch.int64)
LabelTable = torch.Tensor | StringArray


def ints(op: Operator, name: str, required: bool = False) -> list[int]:
    """Integer list attribute ``name`` ([] when absent, unless ``required``)."""
    value = op.attr(name)
    if value is None or (required and np.size(value) == 0):
        if required:
            raise BadInputError(f"{op.op_type}: attribute {name} is required")
        return []
    return [int(v) for v in np.asarray(value).reshape(-1)]


def floats(op: Operator, name: str, required: bool = False) -> np.ndarray:
    """Float list attribute ``name`` as float64 (empty when absent, unless ``required``).

    Version-3 operators may give a ``<name>_as_tensor`` attribute instead (double precision);
    it wins when the plain one is absent.
    """
    value = op.attr(name)
    if value is None or np.size(value) == 0:
        value = op.attr(f"{name}_as_tensor") if f"{name}_as_tensor" in op.attrs else value
    if value is None or np.size(value) == 0:
        if required:
            raise BadInputError(f"{op.op_type}: attribute {name} is required")
        return np.zeros(0)
    return np.asarray(value, dtype=np.float64).reshape(-1)


def choice(op: Operator, name: str, allowed: Sequence[str]) -> str:
    """String attribute ``name``, checked against ``allowed``."""
    value = op.attr(name)
    value = value.decode() if isinstance(value, bytes) else str(value)
    if value not in allowed:
        raise BadInputError(
            f"{op.op_type}: attribute {name} must be one of {list(allowed)}, received {value!r}"
        )
    return value


def int_labels(op: Operator, name: str) -> list[int] | list[str]:
    """The class labels: the strings of the ``*_strings`` twin of attribute ``name`` when it
    is set, else the integers of ``name``."""
    strings = op.attr(name.replace("int64s", "strings").replace("ints", "strings"))
    if strings is not None and len(strings) > 0:
        return [s.decode() if isinstance(s, bytes) else str(s) for s in strings]
    return ints(op, name)


def feature_matrix(op: Operator, x: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """X as a 2-D (N, F) matrix (a 1-D X is one row), checked for type and feature count."""
    if x.dtype not in FEATURE_TYPES:
        raise BadInputError(
            f"{op.op_type}: input X must be float32, float64, int32 or int64, received "
            f"{dtype_name(x.dtype)}"
        )
    if x.dim() == 1:
        x = x.reshape(1, -1)
    if x.dim() != 2:
        raise BadInputError(
            f"{op.op_type}: input X must be 2-D (N, features), received shape {tuple(x.shape)}"
        )
    if width is not None and x.shape[1] != width:
        raise BadInputError(
            f"{op.op_type}: input X must have {width} features, received shape {tuple(x.shape)}"
        )
    return x


def labels_tensor(labels: Sequence[int] | Sequence[str], device: torch.device) -> LabelTable:
    """The labels as a table to index with class positions: an int64 tensor on ``device``, or a
    :class:`~sonnx.strings.StringArray` (on the host) for string labels."""
    if labels and isinstance(labels[0], str):
        return StringArray(object_array(list(labels)))
    return torch.tensor(list(labels), dtype=torch.int64, device=device)


def post_transform(scores: torch.Tensor, name: str) -> torch.Tensor:
    """Apply ``post_transform`` row-wise to scores (N, C), as onnxruntime's write_scores does:
    a single column is only changed by PROBIT. PROBIT is the exact inverse normal CDF
    (onnxruntime uses a 3-digit approximation of erfinv)."""
    if scores.shape[1] == 1 and name != "PROBIT":
        return scores
    if name == "LOGISTIC":
        return torch.sigmoid(scores)
    if name == "SOFTMAX":
        return torch.softmax(scores, dim=1)
    if name == "SOFTMAX_ZERO":
        # Scores within 1e-7 of zero are not exponentiated: they stay (almost) zero.
        peak = scores.amax(dim=1, keepdim=True)
        zero = scores.abs() <= 1e-7
        exp = torch.where(zero, scores * torch.exp(-peak), torch.exp(scores - peak))
        return exp / torch.where(zero, 0.0, exp).sum(dim=1, keepdim=True)
    if name == "PROBIT":
        return math.sqrt(2.0) * torch.special.erfinv(2.0 * scores - 1.0)
    return scores


def binary_scores(score: torch.Tensor, name: str, mode: torch.Tensor | int) -> torch.Tensor:
    """Expand one score column (N,) into onnxruntime's two binary columns (N, 2).

    ``mode`` is onnxruntime's ``add_second_class`` per row (or for all rows): 0 and 1 write
    ``(1 - s, s)``; 2 and 3 write ``(-s, s)``, or ``(sigmoid(-s), sigmoid(s))`` under LOGISTIC;
    -1 keeps the one score and leaves the second column 0. PROBIT transforms the one score.
    """
    if name == "PROBIT":
        return torch.stack([post_transform(score, name), torch.zeros_like(score)], 1)
    mode = torch.as_tensor(mode, device=score.device)
    if name == "LOGISTIC":
        signed = torch.stack([torch.sigmoid(-score), torch.sigmoid(score)], 1)
    else:
        signed = torch.stack([-score, score], 1)
    complement = torch.stack([1 - score, score], 1)
    single = torch.stack([score, torch.zeros_like(score)], 1)
    mode = mode.reshape(-1, 1)
    return torch.where(mode >= 2, signed, torch.where(mode >= 0, complement, single))


def first_argmax(scores: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """The first column holding each row's largest score (onnxruntime's strict ``>`` scan),
    among ``valid`` columns when given."""
    if valid is not None:
        scores = scores.masked_fill(~valid, -math.inf)
    return scores.argmax(dim=1)
