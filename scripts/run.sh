#!/usr/bin/env bash
# The main job on embedded defaults: `logkeeper serve` from the project venv
# (scripts/setup.sh made it). Extra arguments go to `serve` (e.g. --config FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${LK_VENV:-.venv}/bin/python" -m daemon.cli serve "$@"
