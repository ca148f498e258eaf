#!/usr/bin/env bash
# Sets up ./.venv with specviz installed in editable mode. A torch the machine already has is kept
# (the venv sees system site-packages); otherwise torch==2.13.0 is installed, whose CPU build is what a
# machine without a GPU gets. Usage: scripts/setup.sh [extra], e.g. scripts/setup.sh dev
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv --system-site-packages .venv
fi
PY=.venv/bin/python
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install --quiet "torch==2.13.0"
fi
"$PY" -m pip install --quiet --disable-pip-version-check -e ".${1:+[$1]}"
