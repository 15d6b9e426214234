"""Automatic differentiation: the ``training`` flag, ``backward`` and every operation.

Set ``sonnx.autograd.training = True`` before a forward pass whose gradients you want; the
gradients come from torch autograd. Each operation is an :class:`Operator` named as its ONNX
operator, plus a lower-case function with SINGA's name (``relu``, ``conv2d``, …).

``training`` is SINGA's module attribute, kept per thread like torch's grad mode (see
:mod:`sonnx.run_state`): setting it changes it for the thread (the context) that sets it,
from that point on. Another thread, or a server's worker, keeps its own value; a new thread
starts with False, an asyncio task with its creator's value at the time it was created.
``from sonnx.autograd import training`` copies the value at import, as it always did; read
``autograd.training`` to see the flag.
"""

import sys
import types

from sonnx.engine.backward import backward, gradients, trainable_tensors
from sonnx.engine.operator import Operator

# ruff: noqa: F403
from sonnx.operators.activation.functions import *
from sonnx.operators.activation.gated import *
from sonnx.operators.activation.softmax import *
from sonnx.operators.attention.attention import *
from sonnx.operators.conv.conv import *
from sonnx.operators.elementwise import *
from sonnx.operators.elementwise.cast import *
from sonnx.operators.image.decode import *
from sonnx.operators.image.resize import *
from sonnx.operators.indexing.gather_scatter import *
from sonnx.operators.indexing.masks import *
from sonnx.operators.linalg.products import *
from sonnx.operators.loss import *
from sonnx.operators.ml.transforms import *
from sonnx.operators.normalization.batch import *
from sonnx.operators.pooling.windowed import *
from sonnx.operators.quantize.linear import *
from sonnx.operators.quantize.qlinear_conv import *
from sonnx.operators.randomness.generators import *
from sonnx.operators.reduce.reductions import *
from sonnx.operators.rnn.recurrent import *
from sonnx.operators.shape import *
from sonnx.operators.singa.layers import *
from sonnx.operators.spectral.transforms import *
from sonnx.operators.text.features import *
from sonnx.operators.text.strings import *
from sonnx.operators.training.updates import *
from sonnx.run_state import TRAINING


class _AutogradModule(types.ModuleType):
    """This module, with ``training`` read from and written to this thread's run state."""

    @property
    def training(self) -> bool:
        return TRAINING.get()

    @training.setter
    def training(self, value: bool) -> None:
        TRAINING.set(bool(value))


sys.modules[__name__].__class__ = _AutogradModule
