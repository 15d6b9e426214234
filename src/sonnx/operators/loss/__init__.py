"""Losses: ONNX SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss, and SINGA's
softmax_cross_entropy, cross_entropy, mse_loss and binary_cross_entropy.

The SINGA functions follow SINGA's definitions and return a loss of shape (1,) (SINGA code
reads ``tensor.to_numpy(loss)[0]``), averaged over the batch axis 0:

* ``softmax_cross_entropy(x, t)``: mean over samples of ``-sum_c t_c * log_softmax(x)_c``
  (``t`` one-hot / probabilities (N, C), or class labels (N,));
* ``cross_entropy(y, t)``: the same with probabilities ``y`` instead of logits;
* ``mse_loss(x, t)``: ``sum((x - t)^2) / (2 N)`` — SINGA's MeanSquareError, which halves the
  squared error so its gradient is ``(x - t) / N``; it is *not* torch's element mean;
* ``binary_cross_entropy(x, t)``: ``-sum(t log x + (1 - t) log(1 - x)) / N`` with each log
  clamped at -100 (as torch does) so saturated probabilities give a finite loss.

Their operators are composites exported as standard ONNX ops (see each ``export``).
"""

# ruff: noqa: F403, F405
from sonnx.engine.operator import Operator
from sonnx.operators.loss.onnx_losses import *
from sonnx.operators.loss.onnx_losses import __all__ as _onnx_all
from sonnx.operators.singa.losses import *
from sonnx.operators.singa.losses import __all__ as _singa_all

__all__ = [*_onnx_all, *_singa_all]

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    NegativeLogLikelihoodLoss,
    SoftmaxCrossEntropyLoss,
)
