"""The ``ONNX conformance: N/M`` line at the end of a run, with or without pytest-xdist.

tests/onnx/test_conformance.py records each official node case's result in its ``RESULTS``.
Without xdist that dict is this process's. Under xdist each worker holds the results of the
cases it ran: it hands them to the controller in ``workeroutput`` when it finishes, and the
controller, which prints the terminal summary, merges them. A plugin of the root conftest, since
the controller loads no conftest below it."""

from __future__ import annotations

import sys

import pytest

#: The module whose ``RESULTS`` a process fills; read only where that process imported it.
CONFORMANCE_MODULE = "tests.onnx.test_conformance"
#: The key of a worker's ``workeroutput`` that carries its results.
WORKER_KEY = "onnx_conformance"

_from_workers: dict[str, bool] = {}


def _own_results() -> dict[str, bool]:
    module = sys.modules.get(CONFORMANCE_MODULE)
    return dict(module.RESULTS) if module is not None else {}


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker's results travel to the controller (xdist sends ``workeroutput`` after this)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_KEY] = _own_results()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """The controller keeps what each finishing worker ran (an xdist hook: optional without it)."""
    _from_workers.update(getattr(node, "workeroutput", {}).get(WORKER_KEY, {}))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    results = {**_from_workers, **_own_results()}
    if results:
        passed = sum(results.values())
        terminalreporter.write_line(
            f"ONNX conformance: {passed}/{len(results)} official node cases passed "
            f"({100.0 * passed / len(results):.1f} %)"
        )
