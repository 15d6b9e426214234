import os

import numpy as np
import pytest
import torch

import sonnx.autograd as autograd

#: Set to "cpu" to run the tests marked ``cuda`` with the CPU standing in for the GPU.
CUDA_TESTS_DEVICE = "SONNX_CUDA_TESTS_ON"

# The ONNX conformance summary line, printed by the process that reports (the controller under
# pytest-xdist, which collects no test itself and so never loads tests/onnx/conftest.py).
pytest_plugins = ["tests.onnx.conformance_summary"]


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``scripts/test.sh`` runs ``-n 2``) each worker is one of as many
    processes as there are cores: it computes with one torch thread and compiles with one
    inductor thread, so the workers do not oversubscribe the cores they share. Set here, before
    any test imports inductor's config, which reads TORCHINDUCTOR_COMPILE_THREADS once."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
        torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` are skipped, with the reason, where torch sees no GPU (unless
    SONNX_CUDA_TESTS_ON=cpu asks to check their logic on the CPU)."""
    if torch.cuda.is_available() or os.environ.get(CUDA_TESTS_DEVICE) == "cpu":
        return
    skip = pytest.mark.skip(
        reason="needs a CUDA GPU: torch.cuda.is_available() is False "
        f"(set {CUDA_TESTS_DEVICE}=cpu to check these tests' logic on the CPU)"
    )
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _session_inductor_cache(tmp_path_factory):
    """inductor's caches (its precompiled headers, 15 s to build, among them) live in one
    directory for the session, not in the machine's: graph mode's compiles do not read its
    FX-graph cache, and what is there from an earlier run never decides a test."""
    previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor"))
    yield
    if previous is None:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous


@pytest.fixture(autouse=True, scope="module")
def _inference_at_each_module_start():
    """Each module's fixtures start in inference mode, whatever an earlier module's fixtures
    left in this process (a worker runs many modules): a module-scoped fixture runs before
    :func:`_isolate_global_state` and would otherwise see, and keep, a flag leaked by one
    (graph mode compiles nothing while ``autograd.training`` is on)."""
    autograd.training = False
    yield
    autograd.training = False


@pytest.fixture(autouse=True)
def _isolate_global_state(tmp_path_factory, monkeypatch):
    """Each test starts in inference mode with fixed seeds and leaves the flag as it found it,
    and compiles into an empty graph store: a graph another test (or an earlier run on this
    machine) compiled is not loaded from disk, so compile counts are the test's own.

    ``autograd.training`` is per thread (see :mod:`sonnx.run_state`): this sets and restores
    the flag of the thread running the tests; a thread a test starts begins with False."""
    monkeypatch.setenv("SONNX_CACHE_DIR", str(tmp_path_factory.mktemp("sonnx")))
    previous = autograd.training
    autograd.training = False
    torch.manual_seed(0)
    np.random.seed(0)
    yield
    autograd.training = previous
