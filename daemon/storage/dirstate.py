"""The log-dir state machine: ONLINE, SATURATED, OFFLINE (docs/architecture.md, "Log dir states").

`LogDirStates` is the only place that decides a dir's state. It takes evidence (a
`LogDirFailure` from a dir's IoGuard, a probe result, a probe timeout, an operator's
re-admit) and turns it into at most one `Transition` per real change, so a burst of
errors on one dir is one transition, announced once to every listener (log line,
metric, ZooKeeper notification, the dir's IoGuard). The rules:

- OFFLINE wins: any OFFLINE verdict, failed availability probe, or probe timeout takes an
  ONLINE or SATURATED dir OFFLINE; only `readmit` (an operator, after repair) leaves it.
- SATURATED: from ONLINE on an ENOSPC/EDQUOT verdict or free space under the floor;
  back to ONLINE by itself once a space probe finds free space above the resume mark.
- Errors of the process (no verdict) never reach here.

Thread-safe: evidence may arrive from any thread; listeners run on the thread that
caused the transition, outside the lock, and must not block.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from checks import AvailabilityResult, SpaceResult
from logstore import LogDirFailure, Verdict
from logstore.failure import classify_errno

log = logging.getLogger("logkeeper.logdirs")


class DirState(enum.Enum):
    ONLINE = "online"
    SATURATED = "saturated"
    OFFLINE = "offline"


@dataclass(frozen=True)
class Transition:
    log_dir: str
    old: DirState
    new: DirState
    reason: str
    time_ms: int


class LogDirStates:
    def __init__(self, log_dirs: list[str], *, initial: dict[str, DirState] | None = None):
        self._state = {d: DirState.ONLINE for d in log_dirs}
        self._state.update(initial or {})
        self._reason: dict[str, str] = {d: "" for d in log_dirs}
        self._listeners: list[Callable[[Transition], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, listener: Callable[[Transition], None]) -> None:
        self._listeners.append(listener)

    def state(self, log_dir: str) -> DirState:
        with self._lock:
            return self._state[log_dir]

    def reason(self, log_dir: str) -> str:
        with self._lock:
            return self._reason[log_dir]

    def snapshot(self) -> dict[str, DirState]:
        with self._lock:
            return dict(self._state)

    def all_offline(self) -> bool:
        with self._lock:
            return all(s is DirState.OFFLINE for s in self._state.values())

    # ---- evidence ----

    def on_failure(self, failure: LogDirFailure) -> Transition | None:
        if failure.verdict is Verdict.OFFLINE:
            return self._move(failure.log_dir, DirState.OFFLINE, failure.message)
        if failure.verdict is Verdict.SATURATED:
            return self._move(failure.log_dir, DirState.SATURATED, failure.message,
                              only_from=(DirState.ONLINE,))
        return None

    def on_availability(self, result: AvailabilityResult) -> Transition | None:
        if result.ok:
            return None
        verdict = classify_errno(result.errno)
        if verdict is Verdict.NONE:
            return None  # the process ran short of fds or memory: not the disk's fault
        if verdict is Verdict.SATURATED:
            # The canary could not be written because the disk is full: that is the
            # disk-full evidence, not a dead disk.
            return self._move(result.path, DirState.SATURATED,
                              f"availability probe: {result.error}",
                              only_from=(DirState.ONLINE,))
        return self._move(result.path, DirState.OFFLINE,
                          f"availability probe failed: {result.error}")

    def on_probe_timeout(self, log_dir: str, timeout_s: float) -> Transition | None:
        return self._move(log_dir, DirState.OFFLINE,
                          f"availability probe did not answer within {timeout_s:g} s (hung disk)")

    def on_space(self, result: SpaceResult) -> Transition | None:
        if not result.ok and classify_errno(result.errno) is Verdict.NONE:
            return None
        if not result.ok:
            return self._move(result.path, DirState.OFFLINE, f"space probe failed: {result.error}")
        current = self.state(result.path)
        if current is DirState.ONLINE and result.below_floor:
            return self._move(result.path, DirState.SATURATED,
                              f"free space {result.avail_bytes} B under the floor",
                              only_from=(DirState.ONLINE,))
        if current is DirState.SATURATED and result.above_resume:
            return self._move(result.path, DirState.ONLINE,
                              f"free space {result.avail_bytes} B back above the resume mark",
                              only_from=(DirState.SATURATED,))
        return None

    def on_open_failure(self, log_dir: str, reason: str) -> Transition | None:
        """The dir could not be opened at start-up (or re-admitted)."""
        return self._move(log_dir, DirState.OFFLINE, f"cannot open: {reason}")

    def on_slow(self, log_dir: str, reason: str) -> Transition | None:
        """A persistently slow disk, when `log.dir.slow.action` says to take it offline."""
        return self._move(log_dir, DirState.OFFLINE, f"slow disk: {reason}")

    def readmit(self, log_dir: str) -> Transition | None:
        """An operator brought a repaired dir back (after it probed, locked and recovered)."""
        return self._move(log_dir, DirState.ONLINE, "re-admitted by an operator",
                          only_from=(DirState.OFFLINE,))

    # ---- the one transition ----

    def _move(self, log_dir: str, new: DirState, reason: str, *,
              only_from: tuple[DirState, ...] = (DirState.ONLINE, DirState.SATURATED)
              ) -> Transition | None:
        with self._lock:
            old = self._state.get(log_dir)
            if old is None:
                raise KeyError(f"{log_dir} is not a log dir of this broker")
            if old is new or old not in only_from:
                return None
            self._state[log_dir] = new
            self._reason[log_dir] = reason if new is not DirState.ONLINE else ""
            transition = Transition(log_dir, old, new, reason, int(time.time() * 1000))
        log.warning("log dir %s: %s -> %s (%s)", log_dir, old.value, new.value, reason)
        for listener in self._listeners:
            listener(transition)
        return transition
