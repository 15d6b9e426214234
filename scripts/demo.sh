#!/usr/bin/env bash
# The main job on a fresh machine: set up .venv, then run the walkthrough
# (train -> export -> re-import -> infer -> re-train -> transfer-learn). Extra args go to `sonnx demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bootstrap.sh demo
sonnx demo "$@"
