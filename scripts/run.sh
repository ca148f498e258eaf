#!/usr/bin/env bash
# Set everything up and run specviz's main job on the built-in example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/specviz demo "$@"
