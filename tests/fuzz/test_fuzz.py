"""The fuzz suite: broken models and inputs end in a run or a typed sonnx error, in time.

The normal test run takes a fixed slice of ``SONNX_FUZZ_CASES`` cases (default 300) of run
``SONNX_FUZZ_SEED`` (default 0), in one worker process with a 10 s limit per case; a long run
is ``SONNX_FUZZ_CASES=10000 pytest tests/fuzz`` or ``python -m tests.fuzz.run --cases 10000``.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest

import sonnx
from tests.fuzz.mutations import make_case
from tests.fuzz.run import Worker, run_cases, summary
from tests.fuzz.seeds import seeds

CASES = int(os.environ.get("SONNX_FUZZ_CASES", "300"))
SEED = int(os.environ.get("SONNX_FUZZ_SEED", "0"))


def test_every_fuzz_case_runs_or_fails_with_a_typed_error_in_time() -> None:
    outcomes = run_cases(SEED, CASES, jobs=int(os.environ.get("SONNX_FUZZ_JOBS", "1")))
    report = summary(outcomes)
    print(report)
    assert not [o for o in outcomes if o.failed], report
    counts = Counter(o.kind for o in outcomes)
    # The slice reaches both ends: models that still run, and models refused at each layer.
    assert counts["ok"] > 0 and counts["typed"] > 0, report
    assert {o.error for o in outcomes if o.kind == "typed"} >= {
        "BadModelError",
        "BadInputError",
        "ResourceLimitError",
    }, report


def test_cases_are_reproduced_from_their_id() -> None:
    first, again = make_case(SEED, 17), make_case(SEED, 17)
    assert (first.description, first.model, first.files) == (
        again.description,
        again.model,
        again.files,
    )
    assert len({make_case(SEED, i).description for i in range(20)}) > 10


@pytest.mark.parametrize("seed", seeds(), ids=lambda s: s.name)
def test_the_seed_models_run_as_onnxruntime_does(seed) -> None:
    """The unmutated seeds: what the fuzz cases start from is a correct run."""
    got = [o.numpy() for o in sonnx.prepare(seed.model).run(seed.feeds)]
    want = ort.InferenceSession(seed.model, providers=["CPUExecutionProvider"]).run(
        None, seed.feeds
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_a_hanging_case_is_reported_and_the_worker_replaced(tmp_path) -> None:
    """The harness itself: a case that never answers is a ``hang`` after the time limit, and
    the next case runs in a fresh worker."""
    worker = Worker(tmp_path / "worker.log")
    try:
        case = make_case(SEED, 0)
        answered = worker.run(case, timeout=30.0)  # starts the worker
        assert answered.kind in ("ok", "typed")
        os.kill(worker.proc.pid, signal.SIGSTOP)  # the worker stops answering
        started = time.monotonic()
        lost = worker.run(case, timeout=1.0)
        assert lost.kind == "hang" and time.monotonic() - started < 5
        assert worker.run(case, timeout=30.0).kind == answered.kind
    finally:
        worker.stop()
