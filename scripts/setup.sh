#!/usr/bin/env bash
# Installs what logkeeper needs on a fresh Debian machine into a project virtualenv, idempotently.
#   scripts/setup.sh run   : the package itself (gcc + Python headers build the C fast path)
#   scripts/setup.sh test  : plus the Debian packages and PyPI extras the test suite uses
#   scripts/setup.sh system: for systemd: a copy (not an editable link to this checkout,
#                            which ProtectHome= may hide) in /opt/logkeeper (or $LK_VENV),
#                            its `logkeeper` linked from /usr/local/bin (or $LK_BIN), where
#                            systemd/logkeeper.service runs it; installed anew each time
#
# The venv (.venv, or $LK_VENV) is made from $PYTHON (default python3), whatever that is:
# Debian's own externally managed python3, a pyenv one, or any other CPython >= 3.11.
# A venv made from another interpreter is made again. Nothing is reinstalled when
# pyproject.toml, setup.py and the C sources are unchanged since the last install (a
# stamp in the venv records their hash), so a second `make run` starts at once.
# Prints the venv's interpreter path on its last line of stdout (the Makefile uses it).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
PY=${PYTHON:-python3}
if [ "$mode" = system ]; then
  VENV=${LK_VENV:-/opt/logkeeper}
else
  VENV=${LK_VENV:-.venv}
fi
say() { echo "setup: $*" >&2; }

if ! command -v "$PY" >/dev/null 2>&1; then
  say "no interpreter '$PY' (set PYTHON=/path/to/python3.11-or-newer)"
  exit 1
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  say "$PY is $("$PY" -V 2>&1); logkeeper needs Python 3.11 or newer (set PYTHON=...)"
  exit 1
fi
pyver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
pyexe=$("$PY" -c 'import sys, os; print(os.path.realpath(sys.executable))')

# Debian packages: a compiler, and for a Debian interpreter its venv module and headers.
need_apt=()
command -v gcc >/dev/null || need_apt+=(gcc)
if [[ $pyexe == /usr/bin/* ]]; then
  "$PY" -c 'import ensurepip, venv' 2>/dev/null || need_apt+=("python${pyver}-venv")
  inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  [ -f "$inc/Python.h" ] || need_apt+=("python${pyver}-dev")
fi
if [ "$mode" = test ]; then
  # ZooKeeper server (real, for the cluster tests), FUSE, systemd-analyze,
  # mkfs.ext4 and losetup (real faults), ip and nft (network partitions: network
  # namespaces and dropped packets), Java for ZooKeeper and PySpark.
  for pkg in zookeeper fuse3 systemd e2fsprogs mount kmod kcat iproute2 nftables; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
  done
  command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)
  # Node.js and npm for the Node.js Kafka client the group tests run (tests/node).
  command -v node >/dev/null || need_apt+=(nodejs)
  command -v npm >/dev/null || need_apt+=(npm)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    say "need root to apt-get install: ${need_apt[*]}"
    exit 1
  fi
  say "installing Debian packages: ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# The venv, made again when it was made from another interpreter (or is broken).
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.lk-base" 2>/dev/null)" = "$pyexe" ] \
   && "$VENV/bin/python" -c '' 2>/dev/null; then
  :
else
  say "creating the virtualenv $VENV from $pyexe (Python $pyver)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  echo "$pyexe" > "$VENV/.lk-base"
fi
VPY=$VENV/bin/python

if [ "$mode" = system ]; then
  say "installing logkeeper into $VENV (a copy: builds the C fast path)"
  "$VPY" -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v "is ignored: it is neither" >&2 || true
  log=$VENV/pip-install.log
  if ! "$VPY" -m pip install --disable-pip-version-check --progress-bar off --force-reinstall \
       --no-deps . >"$log" 2>&1 \
     || ! "$VPY" -m pip install --disable-pip-version-check --progress-bar off . >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    say "pip install failed; the whole log is $log"
    exit 1
  fi
  # Checked from / : the copy in the venv, not this checkout's sources.
  (cd / && "$VPY" -c "import native; native.crc32c(b'')") \
    || { say "the native fast path did not build (see $log)"; exit 1; }
  bin=${LK_BIN:-/usr/local/bin}
  mkdir -p "$bin"
  ln -sfn "$(cd "$VENV" && pwd)/bin/logkeeper" "$bin/logkeeper"
  say "done: $bin/logkeeper -> $VENV/bin/logkeeper ($("$bin/logkeeper" --version))"
  echo "$VPY"
  exit 0
fi

# What an install depends on: the packaging files and the C sources (Python sources are
# installed editable, so a change to them needs no reinstall).
stamp_of() {
  cat pyproject.toml setup.py native/*.c native/*.h native/build_fastpath.py 2>/dev/null \
    | sha256sum | cut -c1-32
}
want="$(stamp_of)-$mode"
stamp_file=$VENV/.lk-installed
have=$(cat "$stamp_file" 2>/dev/null || true)
# A test install covers a run install.
if [ "$have" != "$want" ] && ! { [ "$mode" = run ] && [ "$have" = "$(stamp_of)-test" ]; }; then
  extras=""
  [ "$mode" = test ] && extras="[test,audit]"
  say "installing logkeeper$extras and its dependencies into $VENV (builds the C fast path;" \
      "the first time takes a minute or two)"
  "$VPY" -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v "is ignored: it is neither" >&2 || true
  log=$VENV/pip-install.log
  set +e
  "$VPY" -m pip install --disable-pip-version-check --progress-bar off -e ".${extras}" 2>&1 \
    | tee "$log" | grep -E --line-buffered "^(Collecting|Building|Successfully)" \
    | sed -u 's/^/setup:   /' >&2
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then
    tail -n 30 "$log" >&2
    say "pip install failed (exit $rc); the whole log is $log"
    exit 1
  fi
  "$VPY" -c "import native; native.crc32c(b'')" \
    || { say "the native fast path did not build (see the pip output above)"; exit 1; }
  echo "$want" > "$stamp_file"
  say "done"
fi
# The Node.js clients of the tests, at the versions tests/node/package-lock.json pins.
if [ "$mode" = test ]; then
  node_stamp=tests/node/node_modules/.lk-installed
  node_want=$(cat tests/node/package.json tests/node/package-lock.json | sha256sum | cut -c1-32)
  if [ "$(cat "$node_stamp" 2>/dev/null)" != "$node_want" ]; then
    say "installing the Node.js test clients (npm ci in tests/node)"
    npm ci --prefix tests/node --no-audit --no-fund --loglevel=error >&2
    echo "$node_want" > "$node_stamp"
  fi
fi
echo "$VPY"
