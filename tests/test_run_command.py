"""The README's run command on a fresh copy of the repository, as a new user types it.

`make run` is started with `env -i` and only the system directories on PATH (so `python3`
is whatever the system has: on Debian, its externally managed interpreter) in a fresh
copy of the checkout, which makes its own `.venv`. The ports move through
`make run ARGS="--config FILE"`: the embedded defaults (9092, 9308) may be taken by a
daemon of another test. The first run must say what it installs; the daemon must answer
ApiVersions and Metadata on its Kafka port and /healthz, and stop cleanly on SIGTERM; a
second run with nothing changed installs nothing (its start-up time is printed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from tests.daemon_helpers import RawClient, free_port, write_config
from tests.install_helpers import SYSTEM_PATH, copy_checkout

# What the set-up says while it works (scripts/setup.sh), in this order.
PROGRESS = ["setup: creating the virtualenv .venv from ",
            "setup: installing logkeeper and its dependencies into .venv",
            "setup:   Collecting ",
            "setup:   Successfully installed ",
            "setup: done"]


class MakeRun:
    """`env -i PATH=<system> make run ARGS="--config FILE"` in `checkout`."""

    def __init__(self, checkout: Path, config: Path, http_port: int, out: Path):
        self.checkout, self.config, self.http_port, self.out = checkout, config, http_port, out
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float) -> float:
        """Start and wait for /healthz; returns the seconds it took."""
        begin = time.monotonic()
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                ["env", "-i", f"PATH={SYSTEM_PATH}", "make", "run", f"ARGS=--config {self.config}"],
                cwd=self.checkout, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = begin + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"make run exited {self.proc.returncode}:\n{self.text()[-4000:]}")
            if self.healthz() == 200:
                return time.monotonic() - begin
            time.sleep(0.05)
        raise AssertionError(f"make run not serving after {timeout} s:\n{self.text()[-4000:]}")

    def healthz(self) -> int | None:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/healthz",
                                        timeout=2) as resp:
                return resp.status
        except OSError:
            return None

    def daemon_pid(self) -> int:
        """make's one child: scripts/run.sh, which execs the daemon in its place."""
        assert self.proc is not None
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])

    def sigterm_daemon(self, timeout: float = 30) -> int:
        """SIGTERM to the daemon; make's exit code (the daemon's, passed on)."""
        assert self.proc is not None
        os.kill(self.daemon_pid(), signal.SIGTERM)
        return self.proc.wait(timeout)

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def check_serving(port: int, http_status: int | None) -> None:
    assert http_status == 200
    c = RawClient(port)
    try:
        versions = c.request(ApiVersionsRequest(), 0)
        assert versions.error_code == 0
        assert {a.api_key for a in versions.api_keys} >= {0, 1, 3, 18}  # Produce, Fetch, Metadata
        meta = c.request(MetadataRequest(topics=[]), 1)
        assert [(b.host, b.port) for b in meta.brokers] == [("127.0.0.1", port)]
    finally:
        c.close()


def test_make_run_with_an_empty_environment_installs_serves_and_stops(tmp_path: Path) -> None:
    checkout = copy_checkout(tmp_path / "logkeeper")
    port, http_port = free_port(), free_port()
    config = write_config(tmp_path / "logkeeper.toml", {
        "log.dirs": [str(tmp_path / "data" / f"disk{i}") for i in range(3)],
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "http.listen": f"127.0.0.1:{http_port}",
        "log.dir.reserve.bytes": 1 << 20,
    })

    first = MakeRun(checkout, config, http_port, tmp_path / "first.out")
    try:
        first_s = first.start(timeout=300)
        check_serving(port, first.healthz())
        assert first.sigterm_daemon() == 0, first.text()[-4000:]
    finally:
        first.kill()
    text = first.text()
    at = [text.find(line) for line in PROGRESS]
    assert -1 not in at and at == sorted(at), f"progress lines missing or out of order:\n{text}"
    assert "stopped cleanly" in text, text[-4000:]
    assert (checkout / ".venv" / "bin" / "python").exists()

    second = MakeRun(checkout, config, http_port, tmp_path / "second.out")
    try:
        second_s = second.start(timeout=60)
        check_serving(port, second.healthz())
        assert second.sigterm_daemon() == 0, second.text()[-4000:]
    finally:
        second.kill()
    assert "setup:" not in second.text(), second.text()  # nothing installed again
    print(f"make run: first start {first_s:.1f} s (with the install), second {second_s:.2f} s")
