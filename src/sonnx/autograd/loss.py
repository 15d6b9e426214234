"""Losses: ONNX SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss, and SINGA's
softmax_cross_entropy, cross_entropy, mse_loss, binary_cross_entropy.
"""

__all__: list[str] = []
