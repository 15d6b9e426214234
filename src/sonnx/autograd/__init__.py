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

# ruff: noqa: F403
from sonnx.autograd.activations import *
from sonnx.autograd.activations_softmax import *
from sonnx.autograd.attention import *
from sonnx.autograd.backward import backward, gradients, trainable_tensors
from sonnx.autograd.cast import *
from sonnx.autograd.conv import *
from sonnx.autograd.conv_quantized import *
from sonnx.autograd.elementwise import *
from sonnx.autograd.image import *
from sonnx.autograd.indexing import *
from sonnx.autograd.legacy_layers import *
from sonnx.autograd.linalg import *
from sonnx.autograd.loss import *
from sonnx.autograd.ml import *
from sonnx.autograd.normalization import *
from sonnx.autograd.operator import Operator
from sonnx.autograd.pooling import *
from sonnx.autograd.quantize import *
from sonnx.autograd.random_ops import *
from sonnx.autograd.reduce import *
from sonnx.autograd.resize import *
from sonnx.autograd.rnn import *
from sonnx.autograd.shape import *
from sonnx.autograd.signal import *
from sonnx.autograd.strings_ops import *
from sonnx.autograd.text import *
from sonnx.autograd.training_ops import *
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
