"""logkeeper installs and serves on every CPython >= 3.11 this machine has.

For each interpreter (on PATH, in /usr/bin and /usr/local/bin, and under pyenv) a fresh
copy of the checkout is installed the README's way (`PYTHON=... LK_VENV=... bash
scripts/setup.sh run`, a new venv), then that venv's `logkeeper serve` runs and a
kafka-python client produces (lz4 batches into a compacted topic the broker writes in
zstd: the codecs are runtime dependencies) and fetches through it. The interpreters run in parallel
(an install mostly waits on pip); pip's cache keeps a reinstall well under a minute.
Under CI (CI=true) the suite fails unless a 3.12 or newer was among them: 3.12 removed
asyncore, which pyinotify imports, so 3.11 alone proves little.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.daemon_helpers import Daemon
from tests.faults import in_ci
from tests.install_helpers import Python, copy_checkout, find_pythons, produce_and_fetch, run_setup

PYTHONS = find_pythons()


@dataclass
class Outcome:
    python: Python
    ok: bool = False
    step: str = "not run"
    detail: str = ""
    install_s: float = 0.0
    total_s: float = 0.0

    def summary(self) -> str:
        verdict = "ok" if self.ok else f"FAILED at {self.step}"
        return (f"Python {self.python.label}: {verdict} (install {self.install_s:.0f} s, "
                f"total {self.total_s:.0f} s)")


def install_and_serve(python: Python, root: Path) -> Outcome:
    """Install into a fresh venv, serve, produce and fetch; every failure is an Outcome."""
    out = Outcome(python)
    start = time.monotonic()
    try:
        out.step = "copy"
        checkout = copy_checkout(root / "src")
        out.step = "install (scripts/setup.sh run)"
        venv = root / "venv"
        code, text, out.install_s = run_setup(checkout, python.path, venv)
        if code != 0:
            out.detail = text[-4000:]
            return out
        out.step = "serve"
        # A compacted topic written in zstd from lz4 batches: the installed codecs read
        # each batch's keys and write it again.
        d = Daemon(root / "run", {"num.partitions": 1, "log.cleanup.policy": "compact",
                                  "compression.type": "zstd"},
                   command=[str(venv / "bin" / "logkeeper")])
        d.start(timeout=60)
        try:
            out.step = "produce and fetch"
            produce_and_fetch(d.bootstrap, "install-check", compression="lz4")
            out.step = "SIGTERM"
            code = d.stop()
            assert code == 0 and "stopped cleanly" in d.stderr(), \
                f"exit {code}:\n{d.stderr()[-2000:]}"
        finally:
            d.kill()
        out.ok, out.step = True, "done"
    except Exception as err:  # noqa: BLE001 - reported per interpreter, not raised
        out.detail = f"{type(err).__name__}: {err}"
    finally:
        out.total_s = time.monotonic() - start
    return out


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """The outcome of every interpreter a selected test asks about, computed in parallel
    once per module (the CI test asks about every 3.12 or newer)."""
    selected: list[Python] = []
    for item in request.session.items:
        if item.module is not request.module:
            continue
        if hasattr(item, "callspec") and "python" in item.callspec.params:
            selected.append(item.callspec.params["python"])
        elif item.name == test_a_python_3_12_or_newer_passes.__name__:
            selected += [p for p in PYTHONS if p.version[:2] >= (3, 12)]
    selected = list(dict.fromkeys(selected))
    base = tmp_path_factory.mktemp("install")
    with ThreadPoolExecutor(max_workers=max(len(selected), 1)) as pool:
        futures = {p.label: pool.submit(install_and_serve, p, base / f"py{i}")
                   for i, p in enumerate(selected)}
        results = {label: f.result() for label, f in futures.items()}
    for r in results.values():
        print(r.summary())
    return results


@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: p.label)
def test_installs_serves_produces_and_fetches(python: Python,
                                              outcomes: dict[str, Outcome]) -> None:
    out = outcomes[python.label]
    assert out.ok, f"{out.summary()}\n{out.detail}"


def test_a_python_3_12_or_newer_passes(outcomes: dict[str, Outcome]) -> None:
    newer = [o for o in outcomes.values() if o.python.version[:2] >= (3, 12)]
    if not newer:
        found = ", ".join(p.label for p in PYTHONS) or "none"
        if in_ci():
            pytest.fail(f"no CPython 3.12 or newer on this machine (found: {found}); CI must "
                        "test one (install one, e.g. with pyenv, or run on Debian 13)")
        pytest.skip(f"no CPython 3.12 or newer here (found: {found}); CI requires one")
    assert any(o.ok for o in newer), "\n".join(o.summary() for o in newer)
