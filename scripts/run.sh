#!/usr/bin/env bash
# Set everything up and serve the dashboard (notebooks/specviz.ipynb, with Voila) on the embedded models.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/specviz dashboard "$@"
