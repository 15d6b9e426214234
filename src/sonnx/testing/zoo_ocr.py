"""A PP-OCR text detector as paddle2onnx writes it, with the statistics of a trained network.

:class:`PPOCRDetector` imitates PaddleOCR's DB detector exported by paddle2onnx at opset 11
(issue #48): a MobileNet-v3 backbone (HardSwish, ReLU6 as ``Clip``, squeeze-excite gated by
paddle's ``HardSigmoid`` of slope 0.2), an RSE feature pyramid (each conv with a
squeeze-excite shortcut, no BatchNorm) whose upsampling is nearest ``Resize`` by scale
(asymmetric, floor), and the DB head: a 3x3 conv, then two ``ConvTranspose`` (kernel 2,
stride 2) written without their bias, each followed by an ``Add`` of it, the first one by
``BatchNormalization`` and ``Relu``, the last one by ``Sigmoid``. BatchNormalization nodes stay
in the file, as paddle2onnx leaves them.

The other stand-ins keep BatchNorm's initial statistics (every channel's scale 1), which hid a
graph-mode bug that scaled a transposed convolution's wrong channels:
:func:`trained_statistics` gives the network the statistics a trained one has instead (some
filters nearly dead, so some running variances near zero; means, variances and affine
parameters that differ from channel to channel) and logits of a few units, as a trained
detector's probability map has.
"""

from __future__ import annotations

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from torch import nn

from sonnx.testing.torch_models import export
from sonnx.testing.zoo_vision import PaddleDBUpsample, dynamic_image_axes

#: ImageNet's per-channel mean and standard deviation, which PaddleOCR normalises images with.
_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
#: A backbone block: kernel, expanded and output channels, squeeze-excite, activation, stride,
#: and whether its output feeds the pyramid.
BlockSetting = tuple[int, int, int, bool, str, int, bool]


class _PaddleHardSigmoid(torch.autograd.Function):
    """Paddle's ``hardsigmoid(x, slope=0.2, offset=0.5)``, exported as one ``HardSigmoid``
    node with those attributes (torch's own is slope 1/6)."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x * 0.2 + 0.5, 0.0, 1.0)

    @staticmethod
    def symbolic(g: torch.Graph, x: torch.Value) -> torch.Value:
        return g.op("HardSigmoid", x, alpha_f=0.2, beta_f=0.5)


class SqueezeExcite(nn.Module):
    """Global average, 1x1 reduce and ReLU, 1x1 expand, paddle's hard sigmoid as the gate."""

    def __init__(self, channels: int, reduction: int = 4) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, max(channels // reduction, 4), 1)
        self.expand = nn.Conv2d(max(channels // reduction, 4), channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * _PaddleHardSigmoid.apply(self.expand(torch.relu(self.reduce(s))))


_ACTIVATIONS = {"hardswish": nn.Hardswish, "relu": nn.ReLU, "relu6": nn.ReLU6}


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]


class InvertedResidual(nn.Module):
    """Expand 1x1, depthwise kxk with the stride, optional squeeze-excite, project 1x1."""

    def __init__(
        self, cin: int, hidden: int, cout: int, k: int, stride: int, se: bool, act: str
    ) -> None:
        super().__init__()
        activation = _ACTIVATIONS[act]
        self.block = nn.Sequential(
            *_conv_bn(cin, hidden, 1), activation(),
            *_conv_bn(hidden, hidden, k, stride, groups=hidden), activation(),
            SqueezeExcite(hidden) if se else nn.Identity(),
            *_conv_bn(hidden, cout, 1),
        )  # fmt: skip
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class RSELayer(nn.Module):
    """PaddleOCR's RSEFPN unit: a conv (no BatchNorm) plus its squeeze-excite."""

    def __init__(self, cin: int, cout: int, k: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2, bias=False)
        self.se = SqueezeExcite(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y + self.se(y)


class PPOCRDetector(nn.Module):
    """Backbone features at strides 4, 8, 16 and 32 (with :attr:`LARGE`), the RSE pyramid,
    the DB head.

    ``settings`` lists the backbone's blocks (see :data:`BlockSetting`; the last block of each
    stride must feed the pyramid); :attr:`LARGE` is about PaddleOCR's mobile detector (62
    convolutions, as the published PP-OCRv4 file), :attr:`SMALL` one quick to compile for tests
    (strides 4 and 8 only).
    ``inner`` is the pyramid's width (96 in PaddleOCR); the head works on a quarter of it.
    """

    LARGE: list[BlockSetting] = [
        (3, 16, 16, True, "relu6", 2, True), (3, 72, 24, False, "relu6", 2, False),
        (3, 88, 24, False, "relu6", 1, True), (5, 96, 40, True, "hardswish", 2, False),
        (5, 240, 40, True, "hardswish", 1, False), (5, 120, 48, True, "hardswish", 1, True),
        (5, 288, 96, True, "hardswish", 2, False), (5, 576, 96, True, "hardswish", 1, True),
    ]  # fmt: skip
    SMALL: list[BlockSetting] = [
        (3, 16, 8, True, "relu6", 2, True), (3, 24, 12, True, "hardswish", 2, True),
    ]  # fmt: skip

    def __init__(self, settings: list[BlockSetting] | None = None, inner: int = 96) -> None:
        super().__init__()
        settings = settings or self.LARGE
        self.stem = nn.Sequential(*_conv_bn(3, 16, 3, 2), nn.Hardswish())
        blocks, taps, cin = [], [], 16
        for k, hidden, cout, se, act, stride, _ in settings:
            blocks.append(InvertedResidual(cin, hidden, cout, k, stride, se, act))
            cin = cout
        self.blocks = nn.ModuleList(blocks)
        #: The blocks whose outputs feed the pyramid.
        self.taps = [i for i, s in enumerate(settings) if s[-1]]
        taps = [settings[i][2] for i in self.taps]
        quarter = inner // 4
        self.lateral = nn.ModuleList(RSELayer(c, inner, 1) for c in taps)
        self.smooth = nn.ModuleList(RSELayer(inner, quarter, 3) for _ in taps)
        self.head = nn.Sequential(*_conv_bn(quarter * len(taps), quarter, 3), nn.ReLU())
        self.upsample = PaddleDBUpsample(quarter)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, features = self.stem(x), []
        for i, block in enumerate(self.blocks):
            y = block(y)
            if i in self.taps:
                features.append(y)
        laterals = [conv(f) for conv, f in zip(self.lateral, features, strict=True)]
        for i in range(len(laterals) - 2, -1, -1):  # top-down, nearest by a scale of 2
            laterals[i] = laterals[i] + F.interpolate(laterals[i + 1], scale_factor=2.0)
        maps = [conv(p) for conv, p in zip(self.smooth, laterals, strict=True)]
        maps = [F.interpolate(m, scale_factor=2.0**i) if i else m for i, m in enumerate(maps)]
        return self.upsample(self.head(torch.cat(maps[::-1], 1)))


def normalized_images(batch: int, height: int, width: int, seed: int = 0) -> np.ndarray:
    """Random pixels in [0, 1), normalised with ImageNet's mean and deviation."""
    pixels = np.random.default_rng(seed).random((batch, 3, height, width), dtype=np.float32)
    return ((pixels - _MEAN) / _STD).astype(np.float32)


def trained_statistics(
    module: PPOCRDetector,
    seed: int = 0,
    dead_fraction: float = 0.1,
    logit_scale: float = 6.0,
    size: tuple[int, int] = (96, 128),
) -> PPOCRDetector:
    """``module`` (in eval mode) with the weights and statistics of a trained network.

    Convolutions get He-initialised weights (those no BatchNorm rescales, the pyramid's and the
    squeeze-excites', a quarter of that gain, so their sums stay near the unit scale);
    ``dead_fraction`` of the filters before a BatchNorm are nearly dead (1e-3 of the scale), so
    their running variances are near zero, as in trained networks. The running statistics are
    measured on normalised random images (``size``), the BatchNorm scales and shifts are then
    drawn per channel, and the output transposed convolution is scaled for logits of
    ``logit_scale``'s spread, centred at minus half of it (most of a page is background).
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        normed = {id(m) for m in _convs_before_batch_norm(module)}
        for m in module.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                fan = m.weight[0].numel() if isinstance(m, nn.Conv2d) else m.weight.shape[0] * 4
                gain = 2.0 if id(m) in normed or isinstance(m, nn.ConvTranspose2d) else 0.5
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (gain / fan) ** 0.5)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
                if id(m) in normed:
                    dead = torch.rand(m.weight.shape[0], generator=g) < dead_fraction
                    m.weight[dead] *= 1e-3
            elif isinstance(m, nn.BatchNorm2d):
                m.momentum = None  # a cumulative average over the batches below
                m.reset_running_stats()
        upsample = module.upsample
        upsample.up_bias.copy_(torch.randn(upsample.up_bias.shape, generator=g) * 0.1)
        module.train()
        for i in range(4):
            module(torch.from_numpy(normalized_images(2, *size, seed=100 + i)))
        module.eval()
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(torch.rand(m.num_features, generator=g) * 1.5 + 0.25)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.5)
        probabilities = module(torch.from_numpy(normalized_images(1, *size, seed=7)))
        logits = torch.logit(probabilities.double().clamp(1e-12, 1 - 1e-12))
        upsample.out.weight *= logit_scale / float(logits.std())
        upsample.out_bias.fill_(-logit_scale / 2)
    return module


def _convs_before_batch_norm(module: nn.Module) -> list[nn.Conv2d]:
    """The convolutions that a BatchNorm directly follows in their ``nn.Sequential``."""
    found = []
    for m in module.modules():
        if isinstance(m, nn.Sequential):
            pairs = zip(list(m)[:-1], list(m)[1:], strict=True)
            found += [a for a, b in pairs if isinstance(b, nn.BatchNorm2d)]
    return found


def export_ppocr_detector(module: PPOCRDetector, opset: int = 11) -> onnx.ModelProto:
    """``module`` exported as paddle2onnx writes the detector: input ``x`` and output ``maps``
    of dynamic batch, height and width (multiples of the deepest stride: 32 with
    :attr:`PPOCRDetector.LARGE`), BatchNormalization kept."""
    axes = dynamic_image_axes(["x"], ["maps"], spatial_outputs=True)
    example = torch.from_numpy(normalized_images(1, 64, 64))
    return export(
        module, (example,), opset, ["x"], ["maps"], keep_batchnorm=True, dynamic_axes=axes
    )
