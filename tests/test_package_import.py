"""What ``import sonnx`` loads: torch, onnx and sonnx's own modules, not the compilers.
(What it leaves alone in the process: tests/test_process_tuning.py.)"""

import subprocess
import sys

#: Modules only graph mode's tracing and compiling need (together 1.5-2.5 s of start-up).
COMPILE_TIME_MODULES = ("torch._inductor", "torch._dynamo", "sympy")


def test_importing_sonnx_leaves_the_compilers_unloaded() -> None:
    script = (
        "import sys, sonnx, sonnx.onnx, sonnx.model, sonnx.layer, sonnx.opt\n"
        f"print(*[m for m in {COMPILE_TIME_MODULES!r} if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
