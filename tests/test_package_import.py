"""What ``import sonnx`` loads (torch, onnx and sonnx's own modules, not the compilers) and how
it treats the garbage collector while it does."""

import gc
import subprocess
import sys

import pytest

from sonnx.gc_pause import collector_paused

#: Modules only graph mode's tracing and compiling need (together 1.5-2.5 s of start-up).
COMPILE_TIME_MODULES = ("torch._inductor", "torch._dynamo", "sympy")


def _run(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_sonnx_leaves_the_compilers_unloaded() -> None:
    script = (
        "import sys, sonnx, sonnx.onnx, sonnx.model, sonnx.layer, sonnx.opt\n"
        f"print(*[m for m in {COMPILE_TIME_MODULES!r} if m in sys.modules])"
    )
    assert _run(script).split() == []


def test_importing_sonnx_and_torch_runs_no_full_collection() -> None:
    # Without the pause, the import ran ~400 collections, three of them over the whole heap.
    script = (
        "import gc\n"
        "full = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and "
        "info['generation'] == 2 and full.append(1))\n"
        "import sonnx, sys\n"
        "print('torch' in sys.modules, len(full), gc.isenabled())"
    )
    assert _run(script).split() == ["True", "0", "True"]


def test_a_program_that_disabled_the_collector_keeps_it_disabled() -> None:
    script = "import gc\ngc.disable()\nimport sonnx\nprint(gc.isenabled())"
    assert _run(script).split() == ["False"]


def test_the_collector_comes_back_when_the_paused_block_raises() -> None:
    assert gc.isenabled()
    with pytest.raises(ImportError), collector_paused():
        assert not gc.isenabled()
        raise ImportError("a module failed to import")
    assert gc.isenabled()
