"""``import sonnx`` changes nothing in the process; ``sonnx.tune_process_for_serving()`` does, and
``sonnx serve`` and ``sonnx demo`` call it.

Each process-wide case runs in a fresh interpreter: the settings are one-way. glibc has no
getter for what ``mallopt`` set, so the malloc policy is observed by what it does: a 32 MiB
tensor (over glibc's largest mmap threshold) is allocated and freed 20 times, and the minor
page faults of the last five are counted. With glibc's defaults each one is a fresh ``mmap``
handed back at ``free``, so every allocation faults its pages in again; with freed memory
kept, the heap serves them from pages it already has (after the first few: until the freed
blocks have merged into one large enough, the heap grows instead).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sonnx import cli

glibc_linux = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="mallopt is glibc's (other C libraries keep their own defaults)",
)

# argv[1]: Python run before ``import sonnx`` (a program's own collector settings);
# argv[2]: "tune" to opt in after preparing the model.
_PROBE = """
import gc, json, resource, sys
exec(sys.argv[1])
def collector():
    return [gc.isenabled(), list(gc.get_threshold()), gc.get_freeze_count()]
before = collector()
import numpy as np, onnx, torch
from onnx import TensorProto, helper
import sonnx
from sonnx import host_memory
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
    "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    [helper.make_tensor("w", TensorProto.FLOAT, [3, 4], [0.5] * 12)],
)
rep = sonnx.prepare(helper.make_model(graph))
if sys.argv[2] == "tune":
    sonnx.tune_process_for_serving()
rep.run([np.ones((2, 3), np.float32)])
faults = []
for _ in range(20):
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(8 * 2**20).fill_(1.0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
print(json.dumps({"kept": host_memory._kept, "faults": faults[-5:], "before": before,
                  "after": collector(), "unfrozen": len(gc.get_objects())}))
"""


def _probe(setup: str = "", tune: bool = False, **env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, setup, "tune" if tune else "no"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _faulted_afresh(probe: dict) -> bool:
    """Each allocation faulted its 8192 pages in again (fewer, never under 16, where the
    kernel backs the mapping with 2 MiB pages): malloc handed the block back at free."""
    return min(probe["faults"]) >= 16


def _reused(probe: dict) -> bool:
    """The allocations touched (almost) no new page: malloc kept the block and reused it."""
    return max(probe["faults"]) < 100


@glibc_linux
def test_import_and_a_run_leave_malloc_and_the_collector_alone() -> None:
    probe = _probe()
    assert probe["kept"] is False and _faulted_afresh(probe), probe
    assert probe["after"] == probe["before"], probe
    assert probe["before"][0] is True and probe["before"][2] == 0, probe


def test_a_programs_own_collector_settings_survive_import_and_a_run() -> None:
    probe = _probe("gc.disable(); gc.set_threshold(5000, 20, 30)")
    assert probe["after"] == probe["before"] == [False, [5000, 20, 30], 0], probe


@glibc_linux
def test_the_opt_in_keeps_freed_memory_and_freezes_what_is_alive() -> None:
    probe = _probe(tune=True)
    assert probe["kept"] is True and _reused(probe), probe
    enabled, threshold, frozen = probe["after"]
    assert enabled and threshold == probe["before"][1], probe
    # torch's, sonnx's and the prepared model's objects: the collector walks only newer ones
    assert frozen > 50_000 and probe["unfrozen"] < frozen / 10, probe


@glibc_linux
def test_the_opt_in_leaves_malloc_alone_when_the_environment_says_so() -> None:
    probe = _probe(tune=True, SONNX_KEEP_HOST_MEMORY="0")
    assert probe["kept"] is False and _faulted_afresh(probe), probe
    assert probe["after"][2] > 50_000, probe  # the collector part still applies


@pytest.mark.parametrize(
    ("argv", "runs"),
    [
        (["serve", "--model-repository", "models"], "sonnx.serve.run_server"),
        (["demo", "--epochs", "1"], "sonnx.walkthrough.run_walkthrough"),
    ],
)
def test_serve_and_demo_opt_in_before_they_run(monkeypatch, argv, runs) -> None:
    calls = []
    monkeypatch.setattr(cli, "tune_process_for_serving", lambda: calls.append("tune"))
    monkeypatch.setattr(runs, lambda *a, **k: calls.append("run") or [])
    monkeypatch.setattr("sonnx.walkthrough.format_table", lambda results: "")
    cli.main(argv)
    assert calls == ["tune", "run"]
