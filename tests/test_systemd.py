"""The systemd unit: `systemd-analyze verify` accepts it, and it is hardened as promised.

systemd-analyze comes from Debian's `systemd` package (`make test` installs it). Without
it these tests skip, except in CI (CI=true), where a missing tool is a failure.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.faults import in_ci

REPO = Path(__file__).resolve().parents[1]
UNIT = REPO / "systemd" / "logkeeper.service"


@pytest.fixture
def analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        if in_ci():
            pytest.fail("systemd-analyze is missing (Debian package `systemd`); CI must have it")
        pytest.skip("systemd-analyze not installed (Debian package `systemd`)")
    return tool


def unit_for_this_machine(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at an executable that exists here: verify checks
    that the command is executable, and the unit names the installed path."""
    exe = shutil.which("logkeeper") or shutil.which("true")
    assert exe
    text = UNIT.read_text().replace("/usr/local/bin/logkeeper", exe)
    out = tmp_path / "logkeeper.service"
    out.write_text(text)
    return out


def test_systemd_analyze_verify_accepts_the_unit(analyze: str, tmp_path: Path) -> None:
    proc = subprocess.run([analyze, "verify", str(unit_for_this_machine(tmp_path))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "logkeeper.service" not in proc.stderr, proc.stderr  # no warnings about it


def test_unit_exposure_stays_low(analyze: str, tmp_path: Path) -> None:
    # --threshold is on systemd's 0-100 scale (the table prints 0.0-10.0): 30 = "3.0 OK".
    proc = subprocess.run([analyze, "security", "--offline=true", "--threshold=30",
                           str(unit_for_this_machine(tmp_path))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr


def service_section() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    section = None
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
        elif line and not line.startswith("#") and section == "[Service]":
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_unit_has_the_promised_settings() -> None:
    s = service_section()
    assert s["Type"] == ["notify"]
    assert s["Restart"] == ["on-failure"]
    assert s["WatchdogSec"] and s["LimitNOFILE"]
    assert s["User"] == ["logkeeper"] and s["Group"] == ["logkeeper"]
    assert s["ProtectSystem"] == ["strict"] and s["NoNewPrivileges"] == ["yes"]
    assert "--config /etc/logkeeper/logkeeper.toml" in s["ExecStart"][0]
    # ReadWritePaths = the example config's log dirs
    from daemon import config

    dirs = config.load(REPO / "systemd" / "logkeeper.toml").log_dirs
    rw = [p.lstrip("-") for v in s["ReadWritePaths"] for p in v.split()]
    assert rw == list(dirs)


def test_every_relaxed_setting_carries_a_comment() -> None:
    lines = UNIT.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("ProcSubset=all", "PrivateNetwork=no")):
            assert lines[i - 1].startswith("#") and "Relaxed" in "".join(lines[i - 2:i]), line
