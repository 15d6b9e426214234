"""Linear and preprocessing operators of the ``ai.onnx.ml`` domain: LinearRegressor,
LinearClassifier, Scaler, Normalizer, Imputer, FeatureVectorizer and OneHotEncoder.

Scores are computed in float64 and returned in the schema's output type (float32), so they
agree with onnxruntime's float32 GEMM to its rounding. See :mod:`sonnx.operators.ml.common` for
which outputs carry a gradient.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sonnx.dtypes import dtype_name
from sonnx.engine.operator import Operator
from sonnx.errors import BadInputError
from sonnx.operators.ml.common import (
    POST_TRANSFORMS,
    MLOperator,
    binary_scores,
    choice,
    feature_matrix,
    first_argmax,
    floats,
    int_labels,
    ints,
    labels_tensor,
    post_transform,
)
from sonnx.strings import StringArray, numbers

__all__ = [
    "FeatureVectorizer",
    "Imputer",
    "LinearClassifier",
    "LinearRegressor",
    "Normalizer",
    "OneHotEncoder",
    "Scaler",
]


def _matrix(op: Operator, name: str, columns: int, device: torch.device) -> torch.Tensor:
    """Attribute ``name`` as rows of ``columns`` values (float64)."""
    values = floats(op, name, required=True)
    if columns == 0 or values.size % columns:
        raise BadInputError(
            f"{op.op_type}: attribute {name} must hold a multiple of the {columns} input "
            f"features, received {values.size} values"
        )
    return torch.as_tensor(values.reshape(-1, columns), device=device)


class LinearRegressor(MLOperator):
    """ai.onnx.ml LinearRegressor: ``Y = X @ coefficients.reshape(targets, F).T + intercepts``
    (float32, (N, targets)), then ``post_transform``."""

    op_type = "LinearRegressor"
    since_versions = (1,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = feature_matrix(self, x)
        targets = int(self.attr("targets"))
        coefficients = _matrix(self, "coefficients", x.shape[1], x.device)
        if coefficients.shape[0] != targets:
            raise BadInputError(
                f"LinearRegressor: X has {x.shape[1]} features, so coefficients must hold "
                f"targets * {x.shape[1]} = {targets * x.shape[1]} values, received "
                f"{coefficients.numel()}"
            )
        scores = x.to(torch.float64) @ coefficients.T
        intercepts = floats(self, "intercepts")
        if intercepts.size:
            scores = scores + torch.as_tensor(intercepts, device=x.device)
        name = choice(self, "post_transform", POST_TRANSFORMS)
        return post_transform(scores, name).to(torch.float32)


class LinearClassifier(MLOperator):
    """ai.onnx.ml LinearClassifier: labels Y (N,) int64 and scores Z (N, classes) float32.

    Scores are ``X @ coefficients.T + intercepts``. With several score columns the label is
    the class of the first largest raw score; with one column it is the second label where
    the score is > 0, else the first (1 and 0 without two labels), and the scores become the
    two columns ``(1 - s, s)`` (``(sigmoid(-s), sigmoid(s))`` under LOGISTIC) when there are
    two labels, as onnxruntime writes them.
    ``multi_class`` does not change the result (onnxruntime ignores it too).
    """

    op_type = "LinearClassifier"
    since_versions = (1,)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = feature_matrix(self, x)
        labels = int_labels(self, "classlabels_ints")
        coefficients = _matrix(self, "coefficients", x.shape[1], x.device)
        scores = x.to(torch.float64) @ coefficients.T
        intercepts = floats(self, "intercepts")
        if intercepts.size:
            if intercepts.size != coefficients.shape[0]:
                raise BadInputError(
                    f"LinearClassifier: intercepts must hold one value per coefficient row "
                    f"({coefficients.shape[0]}), received {intercepts.size}"
                )
            scores = scores + torch.as_tensor(intercepts, device=x.device)
        name = choice(self, "post_transform", POST_TRANSFORMS)
        if scores.shape[1] > 1:
            if labels and len(labels) != scores.shape[1]:
                raise BadInputError(
                    f"LinearClassifier: {scores.shape[1]} score columns need as many class "
                    f"labels, received {len(labels)}"
                )
            index = first_argmax(scores)
            label = labels_tensor(labels, x.device)[index] if labels else index
            return label, post_transform(scores, name).to(torch.float32)
        pair = labels if len(labels) == 2 else [0, 1]
        score = scores[:, 0]
        label = labels_tensor(pair, x.device)[(score > 0).to(torch.int64)]
        if len(labels) == 2:
            # onnxruntime writes (1 - s, s), but (sigmoid(-s), sigmoid(s)) under LOGISTIC
            mode = 2 if name == "LOGISTIC" else 1
            return label, binary_scores(score, name, mode).to(torch.float32)
        return label, post_transform(scores, name).to(torch.float32)


class Scaler(MLOperator):
    """ai.onnx.ml Scaler: ``(X - offset) * scale`` in float32; offset and scale hold one value
    for every feature or one per feature."""

    op_type = "Scaler"
    since_versions = (1,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = feature_matrix(self, x)
        values = {}
        for name in ("offset", "scale"):
            v = floats(self, name)
            if v.size not in (0, 1, x.shape[1]):
                raise BadInputError(
                    f"Scaler: attribute {name} must hold 1 or {x.shape[1]} values (one per "
                    f"feature), received {v.size}"
                )
            values[name] = torch.as_tensor(v, device=x.device) if v.size else None
        y = x.to(torch.float64)
        if values["offset"] is not None:
            y = y - values["offset"]
        if values["scale"] is not None:
            y = y * values["scale"]
        return y.to(torch.float32)


class Normalizer(MLOperator):
    """ai.onnx.ml Normalizer: each row divided by its MAX, L1 or L2 norm (float32); a row
    whose norm is 0 is left as it is."""

    op_type = "Normalizer"
    since_versions = (1,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = feature_matrix(self, x).to(torch.float64)
        norm = choice(self, "norm", ("MAX", "L1", "L2"))
        if norm == "MAX":
            size = x.amax(dim=1, keepdim=True)
        elif norm == "L1":
            size = x.abs().sum(dim=1, keepdim=True)
        else:
            size = x.square().sum(dim=1, keepdim=True).sqrt()
        safe = torch.where(size == 0, 1.0, size)
        return (x / safe).to(torch.float32)


class Imputer(MLOperator):
    """ai.onnx.ml Imputer: replace ``replaced_value_*`` (NaN matches NaN) by the imputed value
    of its feature (or the one value for all), keeping X's type and shape."""

    op_type = "Imputer"
    since_versions = (1,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in (torch.float32, torch.float64, torch.int64, torch.int32):
            raise BadInputError(
                f"Imputer: input X must be float32, float64, int64 or int32, received "
                f"{dtype_name(x.dtype)}"
            )
        is_float = x.is_floating_point()
        name = "imputed_value_floats" if is_float else "imputed_value_int64s"
        imputed = floats(self, name) if is_float else np.asarray(ints(self, name))
        width = x.shape[-1] if x.dim() else 1
        if imputed.size not in (1, width):
            raise BadInputError(
                f"Imputer: attribute {name} must hold 1 or {width} values (one per feature of "
                f"X {tuple(x.shape)}), received {imputed.size}"
            )
        fill = torch.as_tensor(imputed, device=x.device).to(x.dtype)
        if is_float:
            replaced = float(self.attr("replaced_value_float"))
            match = x.isnan() if math.isnan(replaced) else x == replaced
        else:
            match = x == int(self.attr("replaced_value_int64"))
        return torch.where(match, fill, x)


class FeatureVectorizer(MLOperator):
    """ai.onnx.ml FeatureVectorizer: the inputs' columns side by side (float32), each input
    cut or zero-padded to its ``inputdimensions`` entry."""

    op_type = "FeatureVectorizer"
    since_versions = (1,)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        widths = ints(self, "inputdimensions")
        if len(widths) != len(xs):
            raise BadInputError(
                f"FeatureVectorizer: attribute inputdimensions must give one width per input "
                f"({len(xs)}), received {widths}"
            )
        rows = {feature_matrix(self, x).shape[0] for x in xs}
        if len(rows) > 1:
            raise BadInputError(
                f"FeatureVectorizer: every input must have the same number of rows, received "
                f"shapes {[tuple(x.shape) for x in xs]}"
            )
        parts = []
        for x, width in zip(xs, widths, strict=True):
            x = feature_matrix(self, x).to(torch.float32)[:, :width]
            parts.append(torch.nn.functional.pad(x, (0, width - x.shape[1])))
        return torch.cat(parts, dim=1)


class OneHotEncoder(MLOperator):
    """ai.onnx.ml OneHotEncoder: X (...) -> (..., categories) float32, 1 at each value's
    category (``cats_strings`` for string X, ``cats_int64s`` for numbers). A value in no
    category gives a zero row, or an error when ``zeros`` is 0. Float inputs are truncated to
    integers first, as onnxruntime does."""

    op_type = "OneHotEncoder"
    since_versions = (1,)
    takes_strings = True

    def forward(self, x: torch.Tensor | StringArray) -> torch.Tensor:
        categories = int_labels(self, "cats_int64s")
        if not categories:
            raise BadInputError("OneHotEncoder: attribute cats_int64s or cats_strings is required")
        by_name = isinstance(categories[0], str)
        if (type(x) is StringArray) != by_name:
            raise BadInputError(
                f"OneHotEncoder: the categories are {'strings' if by_name else 'int64'}, so "
                f"input X must be {'strings' if by_name else 'numbers'}, received "
                f"{dtype_name(x.dtype)}"
            )
        if by_name:
            hot = numbers(x.array[..., None] == labels_tensor(categories, x.device).array)
            hot = hot.to(torch.bool)
        elif x.dtype not in (torch.int64, torch.int32, torch.float32, torch.float64):
            raise BadInputError(
                f"OneHotEncoder: input X must be int64, int32, float32 or float64, received "
                f"{dtype_name(x.dtype)}"
            )
        else:
            hot = x.to(torch.int64).unsqueeze(-1) == labels_tensor(categories, x.device)
        if int(self.attr("zeros")) == 0:
            unknown = ~hot.any(-1)
            if bool(unknown.any()):
                values = x.array[unknown.cpu().numpy()] if by_name else x[unknown]
                raise BadInputError(
                    f"OneHotEncoder: zeros=0 forbids values outside the categories "
                    f"{categories}, received {sorted(set(values.tolist()))}"
                )
        return hot.to(torch.float32)
