"""Helpers for the install tests: a fresh copy of this checkout, the machine's CPythons,
the README's set-up run against them, and a produce-then-fetch round trip.

`copy_checkout` copies what a fresh clone would hold plus uncommitted work (tracked
files and new files git does not ignore), so a test sees the tree as it is now, never
the build artifacts, venvs or data of this checkout. Errors are not caught here: a
failed copy or a git that is missing fails the test that asked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.daemon_helpers import REPO

MIN_VERSION = (3, 11)
_PYTHON_NAME = re.compile(r"python3(\.\d+)?")
# The PATH of a fresh Debian root shell, without anything a user added.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def checkout_files() -> list[str]:
    """Paths (relative) of what a clone holds plus new files git does not ignore; files
    deleted in the work tree but not yet committed are left out."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True).stdout.decode()
    return [rel for rel in dict.fromkeys(filter(None, listed.split("\0")))
            if (REPO / rel).is_file()]


def copy_checkout(dst: Path) -> Path:
    """Copy `checkout_files()` to `dst`."""
    dst.mkdir(parents=True, exist_ok=True)
    for rel in checkout_files():
        src = REPO / rel
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)
    return dst


@dataclass(frozen=True)
class Python:
    path: str  # the interpreter itself, symlinks and pyenv shims resolved
    version: tuple[int, int, int]

    @property
    def label(self) -> str:
        return f"{'.'.join(map(str, self.version))}:{self.path}"


def _candidates() -> list[str]:
    found: list[str] = []
    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin", "/usr/local/bin"]:
        try:
            names = sorted(os.listdir(d or "."))
        except OSError:
            continue
        found += [os.path.join(d, n) for n in names if _PYTHON_NAME.fullmatch(n)]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found += [str(p) for p in sorted(pyenv.glob("versions/*/bin/python3"))]
    return found


def find_pythons() -> list[Python]:
    """Every CPython >= 3.11 on PATH, in /usr/bin and /usr/local/bin, and under pyenv,
    once each (by the real path of its base interpreter), oldest first.

    A candidate that does not run (a pyenv shim for a version not installed) is left out.
    """
    probe = ("import os, sys; print(sys.implementation.name, *sys.version_info[:3], "
             "os.path.realpath(getattr(sys, '_base_executable', sys.executable)))")
    out: dict[str, Python] = {}
    for exe in _candidates():
        if not os.access(exe, os.X_OK):
            continue
        try:
            res = subprocess.run([exe, "-c", probe], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        fields = res.stdout.split(maxsplit=4)
        if res.returncode != 0 or len(fields) != 5 or fields[0] != "cpython":
            continue
        version = (int(fields[1]), int(fields[2]), int(fields[3]))
        if version[:2] >= MIN_VERSION:
            out.setdefault(fields[4].strip(), Python(fields[4].strip(), version))
    return sorted(out.values(), key=lambda p: (p.version, p.path))


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would leak this venv into another."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHON", "LK_VENV")}
    env.update(extra)
    return env


def run_setup(checkout: Path, python: str, venv: Path, mode: str = "run",
              timeout: float = 300) -> tuple[int, str, float]:
    """`PYTHON=python LK_VENV=venv bash scripts/setup.sh mode` in `checkout`, the README's
    install path. Returns (exit code, stdout and stderr, seconds)."""
    start = time.monotonic()
    res = subprocess.run(["bash", "scripts/setup.sh", mode], cwd=checkout,
                         env=clean_env(PYTHON=python, LK_VENV=str(venv)),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=timeout)
    return res.returncode, res.stdout, time.monotonic() - start


def produce_and_fetch(bootstrap: str, topic: str, count: int = 20, *,
                      compression: str | None = None) -> None:
    """Produce `count` records with kafka-python (acks=all, batches in `compression`)
    and fetch them back from offset 0; AssertionError naming what differs."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    sent = [(b"k%d" % i, b"value-%d" % i) for i in range(count)]
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                             compression_type=compression)
    try:
        futures = [producer.send(topic, key=k, value=v, partition=0) for k, v in sent]
        producer.flush(timeout=30)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close()
    assert offsets == list(range(count)), f"produce to {bootstrap}: offsets {offsets}"
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             group_id=None)
    try:
        consumer.assign([KTP(topic, 0)])
        consumer.seek_to_beginning()
        got: list[tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=500).values():
                got += [(m.offset, m.key, m.value) for m in msgs]
    finally:
        consumer.close()
    assert got == [(i, k, v) for i, (k, v) in enumerate(sent)], \
        f"fetch from {bootstrap}: {len(got)} of {count} records, first {got[:3]}"
