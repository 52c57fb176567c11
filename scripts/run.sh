#!/usr/bin/env bash
# The main job on embedded defaults. Until the daemon lands (issue 3) this is a
# `dump-log --verify-index` over the real Kafka log dirs beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
fixtures=../shared/fixtures/kafka
if python3 -c "import daemon.server" 2>/dev/null; then
  exec logkeeper serve "$@"
fi
exec logkeeper dump-log --verify-index "$fixtures"
