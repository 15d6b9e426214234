"""Optimizers and learning-rate schedules (SINGA's ``opt`` module on PyTorch).

Typical use::

    sgd = opt.SGD(lr=0.05, momentum=0.9)
    for p, gp in autograd.backward(loss):
        sgd.update(p, gp)
    sgd.step()

or simply ``sgd(loss)`` (alias ``sgd.backward_and_update(loss)``).
"""

from sonnx.opt.adagrad import AdaGrad
from sonnx.opt.adam import Adam, AdamW
from sonnx.opt.dist import DistOpt
from sonnx.opt.optimizer import Optimizer
from sonnx.opt.rmsprop import RMSProp
from sonnx.opt.schedules import (
    Constant,
    CosineDecay,
    DecayScheduler,
    ExponentialDecay,
    StepDecay,
)
from sonnx.opt.sgd import SGD

__all__ = [
    "SGD",
    "AdaGrad",
    "Adam",
    "AdamW",
    "Constant",
    "CosineDecay",
    "DecayScheduler",
    "DistOpt",
    "ExponentialDecay",
    "Optimizer",
    "RMSProp",
    "StepDecay",
]
