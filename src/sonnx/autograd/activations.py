"""Activation functions and the softmax family (Relu … Softmax, LogSoftmax, Hardmax)."""

__all__: list[str] = []
