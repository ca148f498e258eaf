#!/usr/bin/env bash
# Set everything up and run the whole test suite: lint, then pytest (Triton kernels in the interpreter
# where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
# packages the system already has are not reinstalled into the venv: run tools as modules
.venv/bin/python -m ruff check .
if ! .venv/bin/python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    export TRITON_INTERPRET=1
fi
exec .venv/bin/python -m pytest "$@"
