"""Run the official ONNX node cases through sonnx and print PASS/FAIL per case.

python scripts/conformance.py                # every case, then the pass rate
python scripts/conformance.py Conv MaxPool   # only the cases of these op types
python scripts/conformance.py --failing      # list failing cases only
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.onnx.conformance import all_cases, run_case


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ops", nargs="*", help="op types (first node's op type) to run")
    parser.add_argument("--failing", action="store_true", help="print only failing cases")
    args = parser.parse_args()
    wanted = set(args.ops)
    passed = total = 0
    failures_by_op: collections.Counter[str] = collections.Counter()
    for name, case in sorted(all_cases().items()):
        ops = {n.op_type for n in case.model.graph.node}
        if wanted and not (ops & wanted):
            continue
        total += 1
        problem = run_case(case)
        if problem is None:
            passed += 1
            if not args.failing:
                print(f"PASS {name}")
        else:
            failures_by_op[case.model.graph.node[-1].op_type] += 1
            print(f"FAIL {name}: {problem}")
    print(f"\n{passed}/{total} cases passed ({100.0 * passed / max(total, 1):.1f} %)")
    if failures_by_op:
        print("failures by op:", ", ".join(f"{k} {v}" for k, v in failures_by_op.most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
