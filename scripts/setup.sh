#!/usr/bin/env bash
# Installs what logkeeper needs on a fresh Debian machine, idempotently.
#   scripts/setup.sh run   : the package itself (gcc + Python headers build the C fast path)
#   scripts/setup.sh test  : plus the Debian packages and PyPI extras the test suite uses
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
PY=${PYTHON:-python3}

need_apt=()
command -v gcc >/dev/null || need_apt+=(gcc)
if [ "$mode" = test ]; then
  # ZooKeeper server (real, for the cluster tests), FUSE, systemd-analyze,
  # mkfs.ext4 and losetup (real faults), Java for ZooKeeper and PySpark.
  for pkg in zookeeper fuse3 systemd e2fsprogs mount kmod; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
  done
  command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to apt-get install: ${need_apt[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

extras=""
[ "$mode" = test ] && extras="[test,audit]"
"$PY" -m pip install -q --disable-pip-version-check -e ".${extras}" 2>&1 \
  | grep -v -e "Running pip as the 'root' user" -e "is ignored: it is neither" || true
"$PY" -c "import native; native.crc32c(b'')" \
  || { echo "setup: the native fast path did not build" >&2; exit 1; }
