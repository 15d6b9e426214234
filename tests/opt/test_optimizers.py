"""Every optimizer's trajectory against torch.optim on the same least-squares problem."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

import sonnx.autograd as autograd
from sonnx import opt
from sonnx.engine.operator import Operator
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

STEPS = 20

rng = np.random.default_rng(42)
A = torch.from_numpy(rng.standard_normal((8, 3)))
B = torch.from_numpy(rng.standard_normal(8))
W0 = torch.from_numpy(rng.standard_normal(3))
C0 = torch.from_numpy(rng.standard_normal(1))


def objective(w: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return ((A @ w + c - B) ** 2).sum()


class LeastSquares(Operator):
    """A test-only recorded op computing the objective, so ``opt(loss)`` can back-propagate."""

    op_type = "TestLeastSquares"

    def forward(self, w: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return objective(w, c)


# (sonnx factory, torch factory) pairs over the same hyper-parameters.
CASES: dict[str, tuple[Callable[[], opt.Optimizer], Callable[[list], torch.optim.Optimizer]]] = {
    "sgd": (lambda: opt.SGD(0.01), lambda ps: torch.optim.SGD(ps, lr=0.01)),
    "sgd-momentum": (
        lambda: opt.SGD(0.01, momentum=0.9),
        lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9),
    ),
    "sgd-dampening-wd": (
        lambda: opt.SGD(0.02, momentum=0.8, dampening=0.3, weight_decay=0.05),
        lambda ps: torch.optim.SGD(ps, lr=0.02, momentum=0.8, dampening=0.3, weight_decay=0.05),
    ),
    "sgd-nesterov": (
        lambda: opt.SGD(0.01, momentum=0.9, nesterov=True, weight_decay=0.01),
        lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.01),
    ),
    "adam": (
        lambda: opt.Adam(0.05, beta_1=0.8, beta_2=0.99, epsilon=1e-6),
        lambda ps: torch.optim.Adam(ps, lr=0.05, betas=(0.8, 0.99), eps=1e-6),
    ),
    "adam-wd": (
        lambda: opt.Adam(0.05, weight_decay=0.1),
        lambda ps: torch.optim.Adam(ps, lr=0.05, weight_decay=0.1),
    ),
    "adamw": (
        lambda: opt.AdamW(0.05, weight_decay=0.1),
        lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1),
    ),
    "rmsprop": (
        lambda: opt.RMSProp(0.01, rho=0.95, epsilon=1e-6, weight_decay=0.01),
        lambda ps: torch.optim.RMSprop(ps, lr=0.01, alpha=0.95, eps=1e-6, weight_decay=0.01),
    ),
    "adagrad": (
        lambda: opt.AdaGrad(0.3, epsilon=1e-8, weight_decay=0.01),
        lambda ps: torch.optim.Adagrad(ps, lr=0.3, eps=1e-8, weight_decay=0.01),
    ),
}


def sonnx_params() -> list[Tensor]:
    return [
        Tensor(data=W0.clone(), stores_grad=True, name="w"),
        Tensor(data=C0.clone(), stores_grad=True, name="c"),
    ]


def sonnx_step(optimizer: opt.Optimizer, params: list[Tensor]) -> None:
    """One step through the per-parameter API the seed code uses: update(p, gp) then step()."""
    w, c = (p.data for p in params)
    grads = torch.autograd.grad(objective(w, c), [w, c])
    for p, g in zip(params, grads, strict=True):
        optimizer.update(p, Tensor(data=g, requires_grad=False))
    optimizer.step()


def torch_trajectory(make: Callable[[list], torch.optim.Optimizer], scheduler=None) -> list:
    ps = [torch.nn.Parameter(W0.clone()), torch.nn.Parameter(C0.clone())]
    optimizer = make(ps)
    sched = scheduler(optimizer) if scheduler else None
    out = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        objective(*ps).backward()
        optimizer.step()
        if sched is not None:
            sched.step()
        out.append([p.detach().clone() for p in ps])
    return out


def assert_same(ours: list[Tensor], theirs: list[torch.Tensor], step: int) -> None:
    for p, q in zip(ours, theirs, strict=True):
        torch.testing.assert_close(p.data, q, rtol=1e-9, atol=1e-12, msg=f"step {step}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_trajectory_matches_torch(case):
    make_ours, make_theirs = CASES[case]
    optimizer, params = make_ours(), sonnx_params()
    for step, expected in enumerate(torch_trajectory(make_theirs)):
        sonnx_step(optimizer, params)
        assert_same(params, expected, step)
    assert objective(*(p.data for p in params)) < objective(W0, C0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_call_backpropagates_and_steps(case):
    """``opt(loss)`` = backward + update of every parameter + step, on a recorded graph (the
    batched path: SGD's multi-tensor kernels must give torch's trajectory too)."""
    autograd.training = True
    make_ours, make_theirs = CASES[case]
    optimizer, params = make_ours(), sonnx_params()
    for step, expected in enumerate(torch_trajectory(make_theirs)):
        loss = LeastSquares()(*params)
        if step % 2:
            optimizer(loss)
        else:
            optimizer.backward_and_update(loss)
        assert_same(params, expected, step)
    assert optimizer.step_counter == STEPS


def test_param_group_overrides_match_torch_groups():
    def make_theirs(ps):
        return torch.optim.SGD(
            [{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.002, "weight_decay": 0.0}],
            lr=0.01,
            momentum=0.9,
            weight_decay=0.1,
        )

    for through_call in (False, True):
        optimizer, params = opt.SGD(0.01, momentum=0.9, weight_decay=0.1), sonnx_params()
        optimizer.add_param_group([params[1]], lr=0.002, weight_decay=0.0)
        assert optimizer.hyper_parameters(params[1])["weight_decay"] == 0.0
        autograd.training = True
        for step, expected in enumerate(torch_trajectory(make_theirs)):
            if through_call:
                optimizer(LeastSquares()(*params))
            else:
                sonnx_step(optimizer, params)
            assert_same(params, expected, step)


@pytest.mark.parametrize("case", ["sgd-momentum", "adam", "rmsprop", "adagrad"])
def test_states_round_trip_continues_identically(case):
    make_ours, _ = CASES[case]
    first, params = make_ours(), sonnx_params()
    for _ in range(5):
        sonnx_step(first, params)
    states = first.get_states()
    assert int(states["step_counter"].item()) == 5
    assert any(key.startswith("w:") for key in states)

    second = make_ours()
    second.set_states(states)
    copies = [p.clone() for p in params]
    for _ in range(5):
        sonnx_step(first, params)
        sonnx_step(second, copies)
    for p, q in zip(params, copies, strict=True):
        assert torch.equal(p.data, q.data)
    assert second.step_counter == 10


def test_get_states_requires_named_parameters():
    optimizer = opt.SGD(0.1, momentum=0.9)
    p = Tensor(data=W0.clone(), stores_grad=True)
    optimizer.update(p, Tensor(data=torch.ones(3, dtype=torch.float64)))
    with pytest.raises(BadInputError, match="no name"):
        optimizer.get_states()


def test_set_states_rejects_malformed_keys():
    with pytest.raises(BadInputError, match="step_counter"):
        opt.SGD(0.1).set_states({})
    with pytest.raises(BadInputError, match="<param name>:<slot>"):
        opt.SGD(0.1).set_states({"step_counter": torch.tensor(1), "w": torch.zeros(3)})


def test_update_checks_gradient_shape_and_type():
    p = Tensor(data=W0.clone(), stores_grad=True, name="w")
    with pytest.raises(BadInputError, match=r"shape \(3,\), received \(4,\)"):
        opt.SGD(0.1).update(p, Tensor(data=torch.zeros(4, dtype=torch.float64)))
    with pytest.raises(BadInputError, match="received \\(Tensor, list\\)"):
        opt.SGD(0.1).update(p, [0.0, 0.0, 0.0])


def test_lr_value_and_setter():
    sgd = opt.SGD(0.5)
    assert sgd.lr_value == 0.5
    sgd.lr = opt.StepDecay(1.0, step_size=2, gamma=0.5)
    sgd.step()
    sgd.step()
    assert sgd.lr_value == 0.5
    with pytest.raises(BadInputError, match="lr must be a finite number >= 0"):
        sgd.lr = -1


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: opt.SGD(-0.1), "SGD: lr must be a finite number >= 0, received -0.1"),
        (lambda: opt.SGD("fast"), "SGD: lr must be a non-negative number or a schedule"),
        (lambda: opt.SGD(0.1, momentum=1.0), r"SGD: momentum must be in \[0, 1\), received 1.0"),
        (lambda: opt.SGD(0.1, momentum=-0.5), r"momentum must be in \[0, 1\)"),
        (lambda: opt.SGD(0.1, momentum=True), "momentum must be a number, received True"),
        (lambda: opt.SGD(0.1, dampening=1.5), r"dampening must be in \[0, 1\]"),
        (lambda: opt.SGD(0.1, weight_decay=-1), "weight_decay must be >= 0"),
        (lambda: opt.SGD(0.1, nesterov=True), "nesterov=True requires momentum > 0"),
        (
            lambda: opt.SGD(0.1, momentum=0.9, dampening=0.1, nesterov=True),
            "dampening = 0",
        ),
        (lambda: opt.SGD(0.1, nesterov=1), "nesterov must be a bool"),
        (lambda: opt.Adam(0.1, beta_1=1.0), r"Adam: beta_1 must be in \[0, 1\)"),
        (lambda: opt.Adam(0.1, beta_2=2), r"beta_2 must be in \[0, 1\)"),
        (lambda: opt.Adam(0.1, epsilon=-1e-8), "epsilon must be >= 0"),
        (lambda: opt.AdamW(0.1, weight_decay=float("nan")), "weight_decay must be finite"),
        (lambda: opt.RMSProp(0.1, rho=1.0), r"RMSProp: rho must be in \[0, 1\)"),
        (lambda: opt.AdaGrad(0.1, epsilon=-1), "AdaGrad: epsilon must be >= 0"),
    ],
)
def test_invalid_hyper_parameters(make, message):
    with pytest.raises(BadInputError, match=message):
        make()


def test_invalid_param_group():
    sgd = opt.SGD(0.1)
    with pytest.raises(BadInputError, match="unknown hyper-parameter"):
        sgd.add_param_group([Tensor(data=W0.clone())], betas=0.9)
    with pytest.raises(BadInputError, match="momentum must be in"):
        sgd.add_param_group([Tensor(data=W0.clone())], momentum=3)
    with pytest.raises(BadInputError, match="expected sonnx Tensors"):
        sgd.add_param_group([W0], lr=0.1)
