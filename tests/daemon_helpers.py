"""Helpers for the daemon tests: run `logkeeper serve` as a real subprocess.

`Daemon` writes a TOML config with three log dirs under a temp dir and free loopback
ports, starts `python -m daemon.cli serve --config ...`, waits for the Kafka port and
/healthz, and stops it (SIGTERM, or SIGKILL on request) afterwards. Its stderr goes to
a file whose tail is shown when start-up fails, so a failing test says why.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from daemon.tools.zookeeper import free_port

REPO = Path(__file__).resolve().parents[1]


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def write_config(path: Path, values: dict[str, Any]) -> Path:
    path.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in values.items()))
    return path


# The tests that listen on, or connect to, the embedded defaults' 127.0.0.1:9092 and
# :9308: each holds a lock while it runs, so parallel workers run them one at a time
# (conftest's `embedded_defaults_ports`).
EMBEDDED_DEFAULTS = pytest.mark.usefixtures("embedded_defaults_ports")


def skip_if_in_use(*ports: int) -> None:
    """Skip the test when something listens on one of these loopback ports (the embedded
    defaults' 9092 and 9308, held by a daemon the developer runs, say)."""
    for port in ports:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                pytest.skip(f"127.0.0.1:{port} is in use; the embedded defaults need it")


class Daemon:
    def __init__(self, root: Path, extra: dict[str, Any] | None = None, *, dirs: int = 3,
                 env: dict[str, str] | None = None, prefix: list[str] | None = None,
                 command: list[str] | None = None):
        """`prefix` goes before the command, e.g. to run the daemon as another user.
        `command` replaces `python -m daemon.cli` from this checkout, e.g. another venv's
        `logkeeper` (then PYTHONPATH is not pointed at this checkout)."""
        self.root = root
        self.host = "127.0.0.1"  # where the tests reach its listeners (another in a netns)
        root.mkdir(parents=True, exist_ok=True)
        self.log_dirs = [root / f"disk{i}" for i in range(dirs)]
        self.port = free_port()
        self.http_port = free_port()
        self.values: dict[str, Any] = {
            "broker.id": 1,
            "log.dirs": [str(d) for d in self.log_dirs],
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "http.listen": f"127.0.0.1:{self.http_port}",
            # 1 MiB instead of 40: dozens of daemons start in the suite, some on small
            # tmpfs dirs. Tests of the reserve itself set their own.
            "log.dir.reserve.bytes": 1 << 20,
        }
        self.values.update(extra or {})
        self.config = write_config(root / "logkeeper.toml", self.values)
        self.stderr_path = root / "daemon.stderr"
        self.env = env
        self.prefix = list(prefix or [])
        self.command = list(command or [])
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Daemon:
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> Daemon:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        if self.command:
            del env["PYTHONPATH"]  # another install imports its own copy
        env.update(self.env or {})
        command = self.command or [sys.executable, "-m", "daemon.cli"]
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                [*self.prefix, *command, "serve", "--config", str(self.config)],
                cwd=self.root, env=env, stdout=err, stderr=err)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode} during start-up:\n"
                                   f"{self.stderr()[-4000:]}")
            if self.healthy():
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"daemon not serving after {timeout}s:\n{self.stderr()[-4000:]}")

    def healthy(self) -> bool:
        try:
            code, body = self.http("/healthz")
        except OSError:
            return False
        return code == 200 and body.get("status") == "serving"

    def http(self, path: str) -> tuple[int, Any]:
        url = f"http://{self.host}:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                data = resp.read()
                code = resp.status
        except urllib.error.HTTPError as err:
            data, code = err.read(), err.code
        if path.startswith(("/healthz", "/log-dirs")):
            return code, json.loads(data)
        return code, data.decode()

    def admin(self, command: str, log_dir: str | Path) -> tuple[int, Any]:
        """POST /admin/<command> {"dir": log_dir}: what `logkeeper log-dirs` sends."""
        from daemon.tools.log_dirs import daemon_call

        return daemon_call(f"{self.host}:{self.http_port}", f"/admin/{command}",
                           {"dir": str(log_dir)})

    def log_dir_states(self) -> dict[str, str]:
        return {e["path"]: e["state"] for e in self.http("/log-dirs")[1]}

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the clean shutdown path. Returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGUSR1)  # the daemon dumps its threads' stacks
                time.sleep(1)
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"daemon ignored SIGTERM for {timeout}s:\n"
                                   f"{self.stderr()[-4000:]}") from None
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: no flush, no checkpoints, no clean-shutdown marker."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def running(root: Path, extra: dict[str, Any] | None = None, **kw: Any) -> Iterator[Daemon]:
    d = Daemon(root, extra, **kw).start()
    try:
        yield d
    finally:
        d.kill()


def snapshot(dirs: list[Path]) -> dict[str, str]:
    """Every file under the log dirs with its SHA-256 (the lock file's content is empty).

    The availability probe's canary (`.logkeeper-probe`) is left out: it is rewritten
    with fresh bytes every probe interval by design, whatever clients do. So is a
    checkpoint's `.tmp` file: the periodic checkpoints rewrite their file (as Kafka's
    do, same bytes when nothing changed) through one, renamed into place at once."""
    out = {}
    for root in dirs:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if name == ".logkeeper-probe" or name.endswith(".tmp"):
                    continue
                p = Path(dirpath) / name
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            for name in dirnames:
                out[str(Path(dirpath) / name) + "/"] = "dir"
    return out


# ---- a raw Kafka-protocol client for bad-input tests ----


class RawClient:
    """One TCP connection speaking frames: send bytes, read one framed response."""

    def __init__(self, port: int, timeout: float = 10.0, client_id: str = "logkeeper", *,
                 tls: ssl.SSLContext | None = None, host: str = "127.0.0.1"):
        """`tls`: speak TLS (an SSL listener), checking the name 127.0.0.1."""
        self.sock = socket.create_connection((host, port), timeout=timeout)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.correlation = 0
        self.client_id = client_id

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes | None:
        """The next response payload, or None when the server closed the connection."""
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def request(self, body: Any, version: int) -> Any:
        """Send a kafka.protocol request object and decode its response."""
        from daemon.api import protocol

        self.correlation += 1
        self.send_raw(protocol.encode_request(body, version, self.correlation, self.client_id))
        frame = self.recv_frame()
        if frame is None:
            raise ConnectionError("server closed the connection")
        api = protocol.SUPPORTED[body.API_KEY]
        resp = protocol.decode_response(api.response, frame, version)
        assert resp.header.correlation_id == self.correlation
        return resp

    def closed_by_server(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def fetch_request(topic: str, partitions: Iterable[int], *, offset: int = 0,
                  max_bytes: int = 64 << 20, partition_max_bytes: int = 1 << 20) -> Any:
    """A consumer's Fetch (kafka-python's, for v4-v12) of `partitions` of `topic` in the
    order given, each from `offset`, answered at once (no min bytes, no wait)."""
    from kafka.protocol.consumer import FetchRequest

    F = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[F(topic=topic, partitions=[F.FetchPartition(
            partition=i, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=partition_max_bytes) for i in partitions])],
        forgotten_topics_data=[], rack_id="")


def aiokafka_read(topic: str, count: int, **consumer: Any) -> list[bytes]:
    """The first `count` values of `topic` as an aiokafka consumer reads them from the
    start (`consumer`: AIOKafkaConsumer's arguments, bootstrap_servers among them)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    async def run() -> list[bytes]:
        ac = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **consumer)
        await ac.start()
        try:
            out: list[bytes] = []
            while len(out) < count:
                batch = await ac.getmany(timeout_ms=5000)
                assert batch, "aiokafka got nothing"
                out += [m.value for msgs in batch.values() for m in msgs]
            return out
        finally:
            await ac.stop()

    return asyncio.run(run())
