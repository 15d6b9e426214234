"""SINGA's older layer forms in autograd: Conv2d, Linear, MaxPool2d, AvgPool2d, BatchNorm2d."""

__all__: list[str] = []
