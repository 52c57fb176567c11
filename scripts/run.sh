#!/usr/bin/env bash
# The main job on embedded defaults. Until the daemon lands (issue 3) this is a
# `dump-log --verify-index` over the real Kafka log dirs beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if "$PY" -c "import daemon.server" 2>/dev/null; then
  exec "$PY" -m daemon.cli serve "$@"
fi
exec "$PY" -m daemon.cli dump-log --verify-index ../shared/fixtures/kafka
