"""systemd's notify protocol (sd_notify(3)) without libsystemd.

`Notifier()` (or `Notifier.from_environment()`) reads NOTIFY_SOCKET (a path, or `@name` for the abstract
namespace) and WATCHDOG_USEC/WATCHDOG_PID. Without NOTIFY_SOCKET every method is a
no-op, so the daemon runs the same outside systemd. A datagram that cannot be sent is
logged and dropped: losing a status line must never stop the service (systemd's own
watchdog notices a daemon that truly stopped notifying).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("logkeeper.notify")


_FROM_ENV = object()  # Notifier() with no address: take it from the environment


class Notifier:
    """sd_notify(3) client. Not thread-safe: call from the event loop thread."""

    def __init__(self, address: Any = _FROM_ENV, watchdog_usec: int | None = None):
        if address is _FROM_ENV:
            address, watchdog_usec = _from_env(os.environ)
        self.address: str | None = address
        self.watchdog_usec = watchdog_usec
        self._sock: socket.socket | None = None
        if address:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        return cls(*_from_env(os.environ if environ is None else environ))

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings: half the timeout, as sd_watchdog_enabled advises."""
        return self.watchdog_usec / 2e6 if self.watchdog_usec else None

    def watchdog_interval_s(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), None without a watchdog."""
        return self.watchdog_interval

    def send(self, *fields: str) -> bool:
        if self._sock is None or not self.address:
            return False
        target = self.address
        if target.startswith("@"):
            target = "\0" + target[1:]
        try:
            self._sock.sendto("\n".join(fields).encode(), target)
        except OSError as err:
            log.warning("sd_notify to %s failed: %s", self.address, err)
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *(["STATUS=" + status] if status else []))

    def stopping(self, status: str = "") -> bool:
        return self.send("STOPPING=1", *(["STATUS=" + status] if status else []))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.send("STATUS=" + text)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _from_env(env: Mapping[str, str]) -> tuple[str | None, int | None]:
    address = env.get("NOTIFY_SOCKET") or None
    usec = None
    raw = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    # WATCHDOG_PID names the process systemd watches; a child that inherited the
    # variables must not ping on the parent's behalf.
    if raw and raw.isdigit() and int(raw) > 0 and (not pid or pid == str(os.getpid())):
        usec = int(raw)
    return address, usec
