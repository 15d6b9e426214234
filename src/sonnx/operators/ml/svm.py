"""Support vector machines of the ``ai.onnx.ml`` domain: SVMClassifier and SVMRegressor.

Every sample is scored at once: the kernel between X and the support vectors is one matrix
(N, vectors), the one-vs-one decision values one product with a (vectors, pairs) matrix built
from the coefficients, the votes one more. Platt calibration (``prob_a``/``prob_b``) follows
onnxruntime: pairwise sigmoid probabilities clipped to [1e-7, 1 - 1e-7], coupled by Wu, Lin
and Weng's iterative method, which runs for all rows together and stops per row as
onnxruntime does. Computed in float64, returned as float32 (the schema's output type).
"""

from __future__ import annotations

import numpy as np
import torch

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

__all__ = ["SVMClassifier", "SVMRegressor"]

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


def _kernel(op: Operator, x: torch.Tensor, vectors: torch.Tensor, kind: str) -> torch.Tensor:
    """The kernel between every row of x (N, F) and every vector (V, F): (N, V)."""
    params = floats(op, "kernel_params")
    gamma, coef0, degree = [*params.tolist(), 0.0, 0.0, 0.0][:3]
    if kind == "RBF":
        return torch.exp(
            -gamma * torch.cdist(x, vectors, compute_mode="donot_use_mm_for_euclid_dist").square()
        )
    dot = x @ vectors.T
    if kind == "POLY":
        return (gamma * dot + coef0).pow(degree)
    if kind == "SIGMOID":
        return torch.tanh(gamma * dot + coef0)
    return dot


def _vectors(op: Operator, count: int, x: torch.Tensor) -> torch.Tensor:
    values = floats(op, "support_vectors", required=True)
    if values.size != count * x.shape[1]:
        raise BadInputError(
            f"{op.op_type}: X has {x.shape[1]} features, so support_vectors must hold "
            f"{count} x {x.shape[1]} = {count * x.shape[1]} values, received {values.size}"
        )
    return torch.as_tensor(values.reshape(count, x.shape[1]), device=x.device)


class SVMClassifier(MLOperator):
    """ai.onnx.ml SVMClassifier: labels Y (N,) int64 and scores Z float32.

    With support vectors (libsvm): one-vs-one decision values (N, pairs) for classes i < j,
    each a vote for i when > 0, else for j; the label is the first most-voted class. Scores
    are the decision values (two columns ``(-s, s)`` for two classes), or with ``prob_a`` the
    calibrated class probabilities (N, classes). Without (liblinear): ``X @ coefficients.T +
    rho[0]`` per class, the label that of the first largest score.
    """

    op_type = "SVMClassifier"
    since_versions = (1,)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = feature_matrix(self, x).to(torch.float64)
        labels = int_labels(self, "classlabels_ints")
        if not labels:
            raise BadInputError(
                "SVMClassifier: attribute classlabels_ints or classlabels_strings is required"
            )
        name = choice(self, "post_transform", POST_TRANSFORMS)
        coefficients = floats(self, "coefficients", required=True)
        rho = floats(self, "rho", required=True)
        per_class = ints(self, "vectors_per_class")
        if sum(per_class) == 0:
            return self._linear(x, labels, coefficients, rho, name)
        if len(per_class) != len(labels):
            raise BadInputError(
                f"SVMClassifier: vectors_per_class must give one count per class "
                f"({len(labels)}), received {per_class}"
            )
        kind = choice(self, "kernel_type", KERNELS)
        kernel = _kernel(self, x, _vectors(self, sum(per_class), x), kind)
        pairs = _pair_matrix(coefficients, per_class, x.device)
        if rho.size < pairs.shape[1]:
            raise BadInputError(
                f"SVMClassifier: rho must hold one value per class pair ({pairs.shape[1]}), "
                f"received {rho.size}"
            )
        decisions = kernel @ pairs + torch.as_tensor(rho[: pairs.shape[1]], device=x.device)
        winner = first_argmax(_votes(decisions, len(labels)))
        label = labels_tensor(labels, x.device)[winner]
        prob_a, prob_b = floats(self, "prob_a"), floats(self, "prob_b")
        if prob_a.size:
            if prob_a.size < decisions.shape[1] or prob_b.size != prob_a.size:
                raise BadInputError(
                    f"SVMClassifier: prob_a and prob_b must each hold one value per class "
                    f"pair ({decisions.shape[1]}), received {prob_a.size} and {prob_b.size}"
                )
            probabilities = _couple(decisions, prob_a, prob_b, len(labels))
            return label, post_transform(probabilities, name).to(torch.float32)
        if len(labels) == 2:
            mode = 2 if name == "NONE" else 0
            return label, binary_scores(decisions[:, 0], name, mode).to(torch.float32)
        return label, post_transform(decisions, name).to(torch.float32)

    def _linear(
        self,
        x: torch.Tensor,
        labels: list[int] | list[str],
        coefficients: np.ndarray,
        rho: np.ndarray,
        name: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """liblinear mode: one linear score per class, as onnxruntime picks the label."""
        if coefficients.size != len(labels) * x.shape[1]:
            raise BadInputError(
                f"SVMClassifier: without support vectors, coefficients must hold classes x "
                f"features = {len(labels)} x {x.shape[1]} values, received {coefficients.size}"
            )
        weights = torch.as_tensor(coefficients.reshape(len(labels), -1), device=x.device)
        scores = x @ weights.T + float(rho[0])
        best = first_argmax(scores)
        if len(labels) == 2:
            top = scores.gather(1, best.unsqueeze(1)).squeeze(1)
            positive = (top >= 0.5) if bool((weights >= 0).all()) else (top > 0)
            best = torch.where(positive, 1, best)
        label = labels_tensor(labels, x.device)[best]
        return label, post_transform(scores, name).to(torch.float32)


def _pair_matrix(coefficients: np.ndarray, per_class: list[int], device) -> torch.Tensor:
    """The (vectors, pairs) matrix whose product with the kernel row gives each one-vs-one
    decision value (without rho): for pair (i, j), class i's vectors weigh with coefficient
    row j - 1 and class j's with row i (libsvm's layout)."""
    classes, count = len(per_class), sum(per_class)
    if coefficients.size != (classes - 1) * count:
        raise BadInputError(
            f"SVMClassifier: coefficients must hold (classes - 1) x vectors = {classes - 1} x "
            f"{count} values, received {coefficients.size}"
        )
    rows = coefficients.reshape(classes - 1, count)
    start = np.concatenate([[0], np.cumsum(per_class)])
    matrix = np.zeros((count, classes * (classes - 1) // 2))
    k = 0
    for i in range(classes):
        for j in range(i + 1, classes):
            matrix[start[i] : start[i + 1], k] = rows[j - 1, start[i] : start[i + 1]]
            matrix[start[j] : start[j + 1], k] = rows[i, start[j] : start[j + 1]]
            k += 1
    return torch.as_tensor(matrix, device=device)


def _pairs(classes: int) -> tuple[list[int], list[int]]:
    first = [i for i in range(classes) for _ in range(i + 1, classes)]
    second = [j for i in range(classes) for j in range(i + 1, classes)]
    return first, second


def _votes(decisions: torch.Tensor, classes: int) -> torch.Tensor:
    """Votes per class (N, classes): pair (i, j) votes i when its decision is > 0, else j."""
    first, second = _pairs(classes)
    to_first = torch.zeros(len(first), classes, dtype=decisions.dtype, device=decisions.device)
    to_first[range(len(first)), first] = 1
    to_second = torch.zeros_like(to_first)
    to_second[range(len(first)), second] = 1
    wins = (decisions > 0).to(decisions.dtype)
    return wins @ to_first + (1 - wins) @ to_second


def _couple(
    decisions: torch.Tensor, prob_a: np.ndarray, prob_b: np.ndarray, classes: int
) -> torch.Tensor:
    """Class probabilities (N, classes) from pairwise Platt probabilities (Wu, Lin, Weng
    method 2, as libsvm and onnxruntime: at most 100 sweeps, a row stops when its largest
    error is below 0.005 / classes)."""
    n, device = decisions.shape[0], decisions.device
    a = torch.as_tensor(prob_a[: decisions.shape[1]], device=device)
    b = torch.as_tensor(prob_b[: decisions.shape[1]], device=device)
    p_pair = torch.sigmoid(-(decisions * a + b)).clamp(1e-7, 1 - 1e-7)
    first, second = _pairs(classes)
    r = decisions.new_zeros(n, classes, classes)
    r[:, first, second] = p_pair
    r[:, second, first] = 1 - p_pair
    # Q[t, t] = sum_{j != t} r[j, t]^2; Q[t, j] = -r[j, t] * r[t, j]
    q = -r.transpose(1, 2) * r
    eye = torch.eye(classes, dtype=torch.bool, device=device)
    q = torch.where(eye, torch.diag_embed(r.square().sum(dim=1)), q)
    p = decisions.new_full((n, classes), 1.0 / classes)
    eps = 0.005 / classes
    active = torch.ones(n, dtype=torch.bool, device=device)
    for _ in range(100):
        qp = (q @ p.unsqueeze(2)).squeeze(2)
        pqp = (p * qp).sum(dim=1)
        active = active & ((qp - pqp.unsqueeze(1)).abs().amax(dim=1) >= eps)
        if not bool(active.any()):
            break
        for t in range(classes):
            diff = (pqp - qp[:, t]) / q[:, t, t]
            diff = torch.where(active, diff, 0.0)
            p = p.clone()
            p[:, t] = p[:, t] + diff
            scale = 1 + diff
            pqp = (pqp + diff * (diff * q[:, t, t] + 2 * qp[:, t])) / scale / scale
            qp = (qp + diff.unsqueeze(1) * q[:, t, :]) / scale.unsqueeze(1)
            p = p / scale.unsqueeze(1)
    return p


class SVMRegressor(MLOperator):
    """ai.onnx.ml SVMRegressor: ``kernel(X, support_vectors) @ coefficients + rho[0]`` (or
    ``X @ coefficients + rho[0]`` without support vectors), float32 (N, 1); with
    ``one_class`` the sign of it as 1 or -1."""

    op_type = "SVMRegressor"
    since_versions = (1,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = feature_matrix(self, x).to(torch.float64)
        count = int(self.attr("n_supports"))
        coefficients = torch.as_tensor(floats(self, "coefficients", required=True), device=x.device)
        rho = floats(self, "rho", required=True)
        if count > 0:
            kind = choice(self, "kernel_type", KERNELS)
            features = _kernel(self, x, _vectors(self, count, x), kind)
        else:
            features = x
        if coefficients.numel() != features.shape[1]:
            raise BadInputError(
                f"SVMRegressor: coefficients must hold {features.shape[1]} values (one per "
                f"{'support vector' if count else 'feature'}), received {coefficients.numel()}"
            )
        scores = (features @ coefficients + float(rho[0])).unsqueeze(1)
        if int(self.attr("one_class")):
            scores = torch.where(scores > 0, 1.0, -1.0).to(scores.dtype)
        name = choice(self, "post_transform", POST_TRANSFORMS)
        return post_transform(scores, name).to(torch.float32)
