"""Vision stand-ins for the model zoo benchmark: random-weight torch modules shaped like the
ONNX files people deploy, exported with torch's TorchScript-based exporter.

- :class:`ResNet50` imitates torchvision's ResNet-50 (bottleneck blocks, 1x1-3x3-1x1 with a
  projection shortcut); exported with BatchNorm folded into Conv, a ``GlobalAveragePool``,
  ``Flatten`` and ``Gemm``.
- :class:`MobileNetV3` imitates MobileNet-v3-Large (depthwise convs, ``HardSwish``,
  squeeze-excite with ``HardSigmoid`` and a broadcast ``Mul``).
- :class:`YoloV8` imitates an Ultralytics YOLOv8 detector: C2f blocks (``Split``, ``Concat``),
  SiLU (``Sigmoid`` + ``Mul``), SPPF (chained ``MaxPool``), nearest ``Resize`` by scale, and
  the anchor-free decoupled head whose anchor grid is computed in the graph from the feature
  maps' shapes (``Shape -> Gather -> Range``, meshgrid as ``Expand``, ``ConstantOfShape``),
  DFL (``Softmax`` and a fixed 1x1 conv) and the box decoding, as ``yolo export`` writes them.
- :class:`DBNet` imitates a PaddleOCR/MMOCR DBNet text detector: a small HardSwish backbone,
  an FPN whose upsampling ``Resize`` takes its ``sizes`` from other feature maps' shapes
  (nearest top-down, bilinear for the fusion), and a head with two ``ConvTranspose`` and a
  sigmoid probability map.
- :class:`PaddleDBHead` imitates the head of a DB text detector as paddle2onnx writes it
  (:class:`PaddleDBUpsample`): each ``ConvTranspose`` without its bias input, followed by an
  ``Add`` of the bias, the last one from 24 channels to one.

YOLOv8 and DBNet take any height and width that are multiples of 32 (export them with
:func:`dynamic_image_axes`).
"""

from __future__ import annotations

import onnx
import torch
import torch.nn.functional as F
from torch import nn

from sonnx.testing.torch_models import export


def dynamic_image_axes(
    inputs: list[str], outputs: list[str], spatial_outputs: bool = False
) -> dict[str, dict[int, str]]:
    """``dynamic_axes`` for ``torch_models.export``: batch, height and width of each input,
    batch of each output (and its last two dims when ``spatial_outputs``; else its last dim,
    the anchors of a detector)."""
    axes = {n: {0: "batch", 2: "height", 3: "width"} for n in inputs}
    for n in outputs:
        axes[n] = (
            {0: "batch", 2: "height", 3: "width"} if spatial_outputs else {0: "batch", 2: "anchors"}
        )
    return axes


def export_image_model(
    module: nn.Module,
    opset: int = 17,
    dynamic_hw: bool = False,
    spatial_outputs: bool = False,
    size: int = 64,
) -> onnx.ModelProto:
    """``module`` exported with input ``images [batch, 3, size, size]`` and output ``output``;
    BatchNorm folded, the batch dynamic (and H x W with ``dynamic_hw``)."""
    axes = (
        dynamic_image_axes(["images"], ["output"], spatial_outputs)
        if dynamic_hw
        else {"images": {0: "batch"}, "output": {0: "batch"}}
    )
    example = torch.randn(1, 3, size, size)
    return export(module, (example,), opset, ["images"], ["output"], dynamic_axes=axes)


def _divisible(value: float, divisor: int = 8) -> int:
    """The channel rounding of the MobileNet papers: nearest multiple of 8, at least 90 %."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]


# ---- ResNet-50 ---------------------------------------------------------------------------------
class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (with the stride, as torchvision's v1.5), 1x1 expand by 4, residual."""

    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = 4 * mid
        self.body = nn.Sequential(
            *_conv_bn(cin, mid, 1), nn.ReLU(),
            *_conv_bn(mid, mid, 3, stride), nn.ReLU(),
            *_conv_bn(mid, cout, 1),
        )  # fmt: skip
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(*_conv_bn(cin, cout, 1, stride))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    """ResNet-50 ([3, 4, 6, 3] bottleneck blocks); ``width`` 64 is the real network."""

    def __init__(
        self, num_classes: int = 1000, width: int = 64, blocks: tuple[int, ...] = (3, 4, 6, 3)
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, width, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for i, n in enumerate(blocks):
            mid = width * 2**i
            for j in range(n):
                layers.append(Bottleneck(cin, mid, 2 if i > 0 and j == 0 else 1))
                cin = 4 * mid
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1)
        return self.fc(torch.flatten(x, 1))


# ---- MobileNet-v3 ------------------------------------------------------------------------------
class SqueezeExcite(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        squeezed = _divisible(channels / 4)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))


class InvertedResidualV3(nn.Module):
    """Expand 1x1, depthwise kxk, optional squeeze-excite, project 1x1; ReLU or HardSwish."""

    def __init__(self, cin: int, k: int, hidden: int, cout: int, se: bool, hs: bool, stride: int):
        super().__init__()
        act = nn.Hardswish if hs else nn.ReLU
        layers: list[nn.Module] = []
        if hidden != cin:
            layers += [*_conv_bn(cin, hidden, 1), act()]
        layers += [*_conv_bn(hidden, hidden, k, stride, groups=hidden), act()]
        if se:
            layers.append(SqueezeExcite(hidden))
        layers += _conv_bn(hidden, cout, 1)
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_res else y


class MobileNetV3(nn.Module):
    """MobileNet-v3-Large's layout; ``width`` scales every channel count (1.0: the real one)."""

    # kernel, expanded channels, output channels, squeeze-excite, hard-swish, stride
    SETTINGS = [
        (3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
        (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
        (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
        (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
        (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1),
    ]  # fmt: skip

    def __init__(self, num_classes: int = 1000, width: float = 1.0) -> None:
        super().__init__()
        cin = _divisible(16 * width)
        layers: list[nn.Module] = [*_conv_bn(3, cin, 3, 2), nn.Hardswish()]
        for k, exp, out, se, hs, stride in self.SETTINGS:
            cout = _divisible(out * width)
            layers.append(InvertedResidualV3(cin, k, _divisible(exp * width), cout, se, hs, stride))
            cin = cout
        last = 6 * cin
        layers += [*_conv_bn(cin, last, 1), nn.Hardswish()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(last, 1280), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1280, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# ---- YOLOv8 ------------------------------------------------------------------------------------
class ConvSiLU(nn.Sequential):
    """Ultralytics' ``Conv``: conv (no bias), BatchNorm, SiLU."""

    def __init__(self, cin: int, cout: int, k: int = 1, stride: int = 1) -> None:
        super().__init__(*_conv_bn(cin, cout, k, stride), nn.SiLU())


class YoloBottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.cv1, self.cv2 = ConvSiLU(c, c, 3), ConvSiLU(c, c, 3)
        self.add = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """Split in two, chain ``n`` bottlenecks on one half, concatenate every output, 1x1 conv."""

    def __init__(self, cin: int, cout: int, n: int, shortcut: bool) -> None:
        super().__init__()
        self.c = cout // 2
        self.cv1 = ConvSiLU(cin, 2 * self.c)
        self.cv2 = ConvSiLU((2 + n) * self.c, cout)
        self.m = nn.ModuleList(YoloBottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5x5 max pools, concatenated."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        hidden = cin // 2
        self.cv1, self.cv2 = ConvSiLU(cin, hidden), ConvSiLU(4 * hidden, cout)
        self.m = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        y.extend(self.m(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


def make_anchors(
    feats: list[torch.Tensor], strides: tuple[int, ...], offset: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor]:
    """Anchor centres and strides of every feature-map cell, from the maps' shapes (as
    Ultralytics computes them at export: ``arange`` + ``meshgrid`` + ``full``)."""
    points, stride_list = [], []
    for x, stride in zip(feats, strides, strict=True):
        _, _, h, w = x.shape
        sx = torch.arange(end=w, dtype=x.dtype) + offset
        sy = torch.arange(end=h, dtype=x.dtype) + offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_list.append(torch.full((h * w, 1), stride, dtype=x.dtype))
    return torch.cat(points), torch.cat(stride_list)


class DFL(nn.Module):
    """Distribution focal loss decoding: the expectation of a softmax over ``reg_max`` bins."""

    def __init__(self, reg_max: int) -> None:
        super().__init__()
        self.reg_max = reg_max
        self.conv = nn.Conv2d(reg_max, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(reg_max, dtype=torch.float32).view(1, -1, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, a = x.shape
        y = x.view(b, 4, self.reg_max, a).transpose(2, 1).softmax(1)
        return self.conv(y).view(b, 4, a)


class Detect(nn.Module):
    """The anchor-free decoupled head: per level a box branch (4 x ``reg_max`` bins) and a class
    branch; output ``[batch, 4 + classes, anchors]`` (xywh in pixels, class probabilities)."""

    STRIDES = (8, 16, 32)

    def __init__(self, num_classes: int, channels: tuple[int, ...], reg_max: int = 16) -> None:
        super().__init__()
        self.nc, self.reg_max = num_classes, reg_max
        c2, c3 = max(16, channels[0] // 4, 4 * reg_max), max(channels[0], min(num_classes, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(ConvSiLU(c, c2, 3), ConvSiLU(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1))
            for c in channels
        )
        self.cv3 = nn.ModuleList(
            nn.Sequential(ConvSiLU(c, c3, 3), ConvSiLU(c3, c3, 3), nn.Conv2d(c3, num_classes, 1))
            for c in channels
        )
        self.dfl = DFL(reg_max)

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        b = feats[0].shape[0]
        no = self.nc + 4 * self.reg_max
        x = [
            torch.cat((box(f), cls(f)), 1)
            for f, box, cls in zip(feats, self.cv2, self.cv3, strict=True)
        ]
        anchors, strides = (t.transpose(0, 1) for t in make_anchors(x, self.STRIDES))
        box, cls = torch.cat([xi.view(b, no, -1) for xi in x], 2).split(
            (4 * self.reg_max, self.nc), 1
        )
        lt, rb = self.dfl(box).chunk(2, 1)
        x1y1, x2y2 = anchors.unsqueeze(0) - lt, anchors.unsqueeze(0) + rb
        xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides
        return torch.cat((xywh, cls.sigmoid()), 1)


class YoloV8(nn.Module):
    """YOLOv8's backbone, PAN neck and head; ``width`` 0.25 and ``depth`` 1/3 are "yolov8n"."""

    def __init__(self, num_classes: int = 80, width: float = 0.25, depth: float = 1 / 3) -> None:
        super().__init__()
        c1, c2, c3, c4, c5 = (int(c * width) for c in (64, 128, 256, 512, 1024))
        n1, n2 = max(round(3 * depth), 1), max(round(6 * depth), 1)
        self.p3 = nn.Sequential(
            ConvSiLU(3, c1, 3, 2), ConvSiLU(c1, c2, 3, 2), C2f(c2, c2, n1, True),
            ConvSiLU(c2, c3, 3, 2), C2f(c3, c3, n2, True),
        )  # fmt: skip
        self.p4 = nn.Sequential(ConvSiLU(c3, c4, 3, 2), C2f(c4, c4, n2, True))
        self.p5 = nn.Sequential(ConvSiLU(c4, c5, 3, 2), C2f(c5, c5, n1, True), SPPF(c5, c5))
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.top4 = C2f(c5 + c4, c4, n1, False)
        self.top3 = C2f(c4 + c3, c3, n1, False)
        self.down3, self.out4 = ConvSiLU(c3, c3, 3, 2), C2f(c3 + c4, c4, n1, False)
        self.down4, self.out5 = ConvSiLU(c4, c4, 3, 2), C2f(c4 + c5, c5, n1, False)
        self.detect = Detect(num_classes, (c3, c4, c5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.p3(x)
        p4 = self.p4(p3)
        p5 = self.p5(p4)
        t4 = self.top4(torch.cat((self.up(p5), p4), 1))
        t3 = self.top3(torch.cat((self.up(t4), p3), 1))
        o4 = self.out4(torch.cat((self.down3(t3), t4), 1))
        o5 = self.out5(torch.cat((self.down4(o4), p5), 1))
        return self.detect([t3, o4, o5])


# ---- DBNet -------------------------------------------------------------------------------------
class DepthwiseSeparable(nn.Sequential):
    """Depthwise kxk (with the stride) then pointwise 1x1, each BatchNorm + HardSwish."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__(
            *_conv_bn(cin, cin, 3, stride, groups=cin), nn.Hardswish(),
            *_conv_bn(cin, cout, 1), nn.Hardswish(),
        )  # fmt: skip


class DBNet(nn.Module):
    """DBNet: backbone features at strides 4, 8, 16, 32, an FPN, the probability-map head.

    ``width`` scales the backbone (16: about PaddleOCR's MobileNet-v3 0.5 detector), ``inner``
    the FPN channels (96 in PaddleOCR's DBFPN).
    """

    def __init__(self, width: int = 16, inner: int = 96) -> None:
        super().__init__()
        chans = [width * m for m in (1, 2, 4, 8, 16)]
        self.stem = nn.Sequential(*_conv_bn(3, chans[0], 3, 2), nn.Hardswish())
        self.stages = nn.ModuleList(
            nn.Sequential(DepthwiseSeparable(chans[i], chans[i + 1], 2),
                          DepthwiseSeparable(chans[i + 1], chans[i + 1], 1))
            for i in range(4)
        )  # fmt: skip
        self.lateral = nn.ModuleList(nn.Conv2d(c, inner, 1, bias=False) for c in chans[1:])
        self.smooth = nn.ModuleList(
            nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False) for _ in chans[1:]
        )
        quarter = inner // 4
        self.head = nn.Sequential(
            nn.Conv2d(inner, quarter, 3, padding=1, bias=False), nn.BatchNorm2d(quarter), nn.ReLU(),
            nn.ConvTranspose2d(quarter, quarter, 2, 2), nn.BatchNorm2d(quarter), nn.ReLU(),
            nn.ConvTranspose2d(quarter, 1, 2, 2),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats, y = [], self.stem(x)
        for stage in self.stages:
            y = stage(y)
            feats.append(y)
        laterals = [conv(f) for conv, f in zip(self.lateral, feats, strict=True)]
        for i in range(len(laterals) - 2, -1, -1):  # top-down: sizes taken from the shapes
            above = F.interpolate(laterals[i + 1], size=laterals[i].shape[2:], mode="nearest")
            laterals[i] = laterals[i] + above
        size = laterals[0].shape[2:]
        fused = [conv(p) for conv, p in zip(self.smooth, laterals, strict=True)]
        fused[1:] = [
            F.interpolate(p, size=size, mode="bilinear", align_corners=False) for p in fused[1:]
        ]
        return torch.sigmoid(self.head(torch.cat(fused[::-1], 1)))


class PaddleDBUpsample(nn.Module):
    """The two transposed convolutions that bring DB's probability map to the image's size, as
    paddle2onnx writes them: ``ConvTranspose`` (no bias) + ``Add`` of its bias +
    ``BatchNormalization`` + ``Relu``, then ``ConvTranspose`` to one channel (weight
    [channels, 1, 2, 2]) + ``Add`` + ``Sigmoid``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(channels, channels, 2, 2, bias=False)
        self.up_bias = nn.Parameter(torch.randn(channels))
        self.norm = nn.BatchNorm2d(channels)
        self.out = nn.ConvTranspose2d(channels, 1, 2, 2, bias=False)
        self.out_bias = nn.Parameter(torch.randn(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(x) + self.up_bias.reshape(1, -1, 1, 1)
        y = torch.relu(self.norm(y))
        return torch.sigmoid(self.out(y) + self.out_bias.reshape(1, -1, 1, 1))


class PaddleDBHead(nn.Module):
    """A small Conv-BatchNorm-ReLU backbone and DB's probability head, its transposed
    convolutions' biases added separately as paddle2onnx exports them
    (:class:`PaddleDBUpsample`)."""

    def __init__(self, channels: int = 24) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            *_conv_bn(3, channels, 3, 2), nn.ReLU(), *_conv_bn(channels, channels, 3, 2), nn.ReLU()
        )
        self.head = PaddleDBUpsample(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))
