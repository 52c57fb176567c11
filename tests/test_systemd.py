"""The systemd side: the unit verifies with systemd-analyze, the sysusers entry creates
the service user, the example config loads, and sd_notify datagrams reach a real socket.

systemd-analyze and systemd-sysusers come from Debian's systemd package. Outside CI a
machine without them skips those tests; with CI=true a missing tool fails them.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.config import load
from daemon.ops.notify import Notifier
from tests.daemon_helpers import Daemon
from tests.faults import in_ci
from tests.install_helpers import clean_env, copy_checkout, produce_and_fetch

REPO = Path(__file__).resolve().parents[1]
SYSTEMD = REPO / "systemd"
UNIT = SYSTEMD / "logkeeper.service"
SHIPPED_EXEC = "ExecStart=/usr/local/bin/logkeeper serve --config /etc/logkeeper/logkeeper.toml"


def need_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if in_ci():
            pytest.fail(f"{name} is not installed; CI needs Debian's systemd package")
        pytest.skip(f"{name} is not installed (Debian package systemd)")
    return path


def unit_for_this_machine(tmp_path: Path) -> Path:
    """The shipped unit with ExecStart pointing at a binary that exists here.

    verify checks that ExecStart's binary is executable; /usr/local/bin/logkeeper only
    exists on an installed host.
    """
    text = UNIT.read_text()
    assert SHIPPED_EXEC in text.splitlines()
    binary = shutil.which("logkeeper")
    exec_start = (f"ExecStart={binary} serve --config /etc/logkeeper/logkeeper.toml" if binary
                  else f"ExecStart={sys.executable} -m daemon.cli serve "
                       "--config /etc/logkeeper/logkeeper.toml")
    unit = tmp_path / "logkeeper.service"
    unit.write_text(text.replace(SHIPPED_EXEC, exec_start))
    return unit


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    tool = need_tool("systemd-analyze")
    proc = subprocess.run([tool, "verify", str(unit_for_this_machine(tmp_path))],
                          capture_output=True, text=True, timeout=120)
    # verify prints a line for every unknown key or unparsable value but may still
    # exit 0, so any output at all is a failure.
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), \
        proc.stdout + proc.stderr


def test_verify_would_catch_a_broken_unit(tmp_path: Path) -> None:
    """The check above is not vacuous: a typo in a directive is reported."""
    tool = need_tool("systemd-analyze")
    unit = unit_for_this_machine(tmp_path)
    unit.write_text(unit.read_text().replace("ProtectSystem=strict", "ProtectSystem=strictly"))
    proc = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True,
                          timeout=120)
    assert "ProtectSystem" in proc.stdout + proc.stderr or "protect system" in proc.stderr


def unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_unit_is_a_hardened_notify_service_with_a_watchdog() -> None:
    s = unit_settings()
    expect = {"Type": "notify", "WatchdogSec": "30s", "Restart": "on-failure",
              "LimitNOFILE": "1048576", "User": "logkeeper", "Group": "logkeeper",
              "ProtectSystem": "strict", "NoNewPrivileges": "yes", "PrivateTmp": "yes",
              "ProtectHome": "yes", "ProtectKernelTunables": "yes",
              "ProtectKernelModules": "yes", "StateDirectory": "logkeeper"}
    for key, value in expect.items():
        assert s.get(key) == [value], key
    assert s["ExecStart"] == ["/usr/local/bin/logkeeper serve --config /etc/logkeeper/logkeeper.toml"]
    assert set(s["RestrictAddressFamilies"][0].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    # Every log dir of the example config is writable under ProtectSystem=strict.
    writable = {p.lstrip("-") for v in s["ReadWritePaths"] for p in v.split()}
    assert set(load(SYSTEMD / "logkeeper.toml").log_dirs) <= writable


def test_relaxed_settings_carry_a_comment_saying_why() -> None:
    lines = UNIT.read_text().splitlines()
    relaxed = ("ProcSubset=all", "PrivateNetwork=no")
    for setting in relaxed:
        i = lines.index(setting)
        comment = []
        while lines[i - 1].startswith("#"):
            i -= 1
            comment.append(lines[i])
        assert any(c.startswith("# Relaxed:") for c in comment), setting


def test_hardening_exposure_score_is_low(tmp_path: Path) -> None:
    tool = need_tool("systemd-analyze")
    proc = subprocess.run([tool, "security", "--offline=yes", "--no-pager",
                           str(unit_for_this_machine(tmp_path))],
                          capture_output=True, text=True, timeout=120)
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", proc.stdout + proc.stderr)
    assert match, proc.stdout + proc.stderr
    # systemd's scale: 0 is fully locked down, 10 is none; under 2 is rated "OK".
    assert float(match.group(1)) < 2.0, proc.stdout


def test_sysusers_entry_creates_the_service_user(tmp_path: Path) -> None:
    tool = need_tool("systemd-sysusers")
    (tmp_path / "etc").mkdir()
    proc = subprocess.run([tool, f"--root={tmp_path}", str(SYSTEMD / "logkeeper.sysusers.conf")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    passwd = (tmp_path / "etc" / "passwd").read_text().splitlines()
    user = next(line.split(":") for line in passwd if line.startswith("logkeeper:"))
    assert user[5] == "/var/lib/logkeeper" and user[6].endswith("nologin")
    assert any(line.startswith("logkeeper:") for line in
               (tmp_path / "etc" / "group").read_text().splitlines())


def test_example_config_loads_and_names_its_dirs() -> None:
    cfg = load(str(SYSTEMD / "logkeeper.toml"))
    assert cfg.log_dirs == ("/data/disk0", "/data/disk1", "/data/disk2")
    assert (cfg.listener.host, cfg.listener.port) == ("", 9092)  # every interface
    assert cfg.http_listen == ("127.0.0.1", 9308) and cfg.standalone


# ---- sd_notify over a real datagram socket ----


def recv_all(sock: socket.socket) -> list[str]:
    out = []
    sock.settimeout(0.2)
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except TimeoutError:
            return out


def test_notify_sends_each_message_to_a_path_socket(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        monkeypatch.setenv("WATCHDOG_USEC", "30000000")
        monkeypatch.delenv("WATCHDOG_PID", raising=False)
        n = Notifier()
        assert n.watchdog_interval_s() == 15.0
        assert n.status("opening log dirs")
        assert n.ready()
        assert n.watchdog()
        assert n.stopping()
        n.close()
        assert recv_all(sock) == ["STATUS=opening log dirs", "READY=1", "WATCHDOG=1",
                                  "STOPPING=1"]


def test_notify_reaches_an_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"logkeeper-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        n = Notifier()
        assert n.ready("serving on 127.0.0.1:9092")
        n.close()
        assert recv_all(sock) == ["READY=1\nSTATUS=serving on 127.0.0.1:9092"]


def test_notify_without_notify_socket_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    n = Notifier()
    assert not n.enabled and n.watchdog_interval_s() is None
    assert not n.ready() and not n.watchdog() and not n.stopping() and not n.status("x")


def test_watchdog_for_another_pid_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert Notifier().watchdog_interval_s() is None
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert Notifier().watchdog_interval_s() == 0.5


def test_a_gone_socket_is_logged_not_raised(tmp_path: Path) -> None:
    n = Notifier(str(tmp_path / "nobody-listens.sock"))
    assert n.enabled and n.ready() is False
    n.close()


def test_every_key_in_the_example_config_is_documented() -> None:
    from daemon.config import KEYS

    lines = (SYSTEMD / "logkeeper.toml").read_text().splitlines()
    for key in KEYS:
        at = [i for i, line in enumerate(lines)  # a dotted key may be quoted (TOML)
              if line.lstrip("# ").startswith((f"{key} = ", f'"{key}" = '))]
        assert at, f"example config does not show {key}"
        above = lines[at[0] - 1]
        assert above.startswith("# ") and not above.lstrip("# ").startswith(tuple(KEYS)), \
            f"{key} has no comment above it"


def test_the_system_install_serves_with_the_checkout_gone(tmp_path: Path) -> None:
    """`scripts/setup.sh system` (the README's step before the unit) installs a copy,
    not an editable link: its `logkeeper`, linked where the unit's ExecStart looks (here
    LK_BIN), serves with the checkout deleted (ProtectHome= hides a checkout under /root
    or /home from the service), and the unit naming it verifies."""
    checkout = copy_checkout(tmp_path / "src")
    venv, bindir = tmp_path / "opt" / "logkeeper", tmp_path / "bin"
    res = subprocess.run(["bash", "scripts/setup.sh", "system"], cwd=checkout,
                         env=clean_env(PYTHON=os.path.realpath(sys.executable),
                                       LK_VENV=str(venv), LK_BIN=str(bindir)),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout[-4000:]
    binary = bindir / "logkeeper"
    assert binary.is_symlink() and binary.resolve() == (venv / "bin" / "logkeeper").resolve()
    shutil.rmtree(checkout)
    with Daemon(tmp_path / "run", {"num.partitions": 1}, command=[str(binary)]) as d:
        produce_and_fetch(d.bootstrap, "installed")
    analyze = need_tool("systemd-analyze")
    unit = tmp_path / "logkeeper.service"
    unit.write_text(UNIT.read_text().replace(
        SHIPPED_EXEC, f"ExecStart={binary} serve --config /etc/logkeeper/logkeeper.toml"))
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), \
        proc.stdout + proc.stderr
