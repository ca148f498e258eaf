#!/usr/bin/env bash
# Set everything up and run the whole test suite: lint, then pytest (Triton kernels in the interpreter
# where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
# kaleido's image export and the browser tests drive a system Chromium; Debian's, where we may install it
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# packages the system already has are not reinstalled into the venv: run tools as modules
.venv/bin/python -m ruff check .
if ! .venv/bin/python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    export TRITON_INTERPRET=1
fi
exec .venv/bin/python -m pytest "$@"
