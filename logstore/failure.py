"""The one place where an OSError from a log dir's files becomes a verdict on the disk.

Every filesystem call on a log dir runs inside its `IoGuard.io(op, path)`. An OSError
raised there is classified by errno (docs/architecture.md, "Log dir states"):

- ENOSPC, EDQUOT: the dir is SATURATED; confirmed with a space probe of the dir, and
  a probe that itself fails makes the verdict OFFLINE;
- EMFILE, ENFILE, ENOMEM, ENOBUFS: the process ran short, not the disk; no verdict,
  `ResourceError` is raised and nothing is reported;
- EINVAL, ENAMETOOLONG: the kernel refused the call for what it asked (a file name
  past NAME_MAX, an argument it does not take), not for the disk; no verdict,
  `OperationRefusedError` is raised and nothing is reported;
- anything else (EIO, EROFS, ENXIO, ENODEV, ESTALE, EACCES/EPERM on our own files, a
  vanished dir root...): the dir is OFFLINE.

A verdict is reported to the dir's `FailureChannel` (each failing call once; the daemon
turns a burst into one transition) and raised as `LogDirSaturatedError` or
`LogDirOfflineError`, chained to the OSError. No other code decides a disk's fate.
"""

from __future__ import annotations

import errno as errno_mod
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import (
    LogDirOfflineError,
    LogDirSaturatedError,
    LogMovedError,
    LogStoreError,
    OperationRefusedError,
    ResourceError,
    StorageError,
    Verdict,
)

SATURATING_ERRNOS = frozenset({errno_mod.ENOSPC, errno_mod.EDQUOT})
PROCESS_ERRNOS = frozenset({errno_mod.EMFILE, errno_mod.ENFILE, errno_mod.ENOMEM, errno_mod.ENOBUFS})
REQUEST_ERRNOS = frozenset({errno_mod.EINVAL, errno_mod.ENAMETOOLONG})


def classify_errno(code: int | None) -> Verdict:
    """The verdict an errno alone gives (no probing): the one errno classifier.

    Used for OSErrors raised on a log dir's files and for the errnos the health checks
    report (a probe's canary write, its space probe)."""
    if code in PROCESS_ERRNOS or code in REQUEST_ERRNOS:
        return Verdict.NONE
    if code in SATURATING_ERRNOS:
        return Verdict.SATURATED
    return Verdict.OFFLINE


def classify(err: OSError) -> Verdict:
    """The verdict an OSError's errno alone gives (no probing)."""
    return classify_errno(err.errno)


@dataclass(frozen=True)
class LogDirFailure:
    """One failed operation on a log dir, as reported to the failure channel."""

    log_dir: str
    verdict: Verdict
    op: str
    path: str
    errno: int | None
    message: str
    time_ms: int


class FailureChannel:
    """Carries LogDirFailure events from IO paths to the daemon's single handler.

    Thread-safe: any worker may `report`; one consumer calls `get`. Listeners added with
    `subscribe` are called synchronously on the reporting thread and must not block.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[LogDirFailure] = queue.SimpleQueue()
        self._listeners: list[Callable[[LogDirFailure], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, listener: Callable[[LogDirFailure], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def report(self, failure: LogDirFailure) -> None:
        self._queue.put(failure)
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(failure)

    def get(self, timeout: float | None = None) -> LogDirFailure | None:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None


def _probe_space(log_dir: str) -> OSError | None:
    """Run the space probe; return its OSError if the dir cannot even be probed."""
    import native  # late: keeps this module importable for error classes alone

    try:
        native.space_probe(log_dir)
    except OSError as err:
        return err
    return None


class IoGuard:
    """Wraps a log dir's IO: classifies failures, reports them, raises typed errors.

    Thread-safe. `log_dir` is the directory whose disk the guarded files live on.
    """

    def __init__(self, log_dir: str | os.PathLike[str], channel: FailureChannel | None = None):
        self.log_dir = os.fspath(log_dir)
        self.channel = channel
        # Set by the owner (the daemon) when the dir leaves ONLINE; checked by callers
        # that must not touch a dir that is offline (`io(..., writing=...)`).
        self.verdict = Verdict.NONE

    @contextmanager
    def io(self, op: str, path: str | os.PathLike[str] | None = None, *,
           writing: bool | None = None) -> Iterator[None]:
        """Run the block's filesystem calls for `op`: an OSError becomes a verdict.

        With `writing` given, the dir's known state is checked first (as
        `check_usable`): an OFFLINE dir refuses everything, a SATURATED one writes.
        """
        if writing is not None:
            self.check_usable(op, writing=writing)
        try:
            yield
        except OSError as err:
            raise self.translate(err, op, path) from err

    def check_usable(self, op: str, *, writing: bool) -> None:
        """Raise without touching the disk when the dir's known state forbids `op`.

        `io(..., writing=...)` does this for a block; the append path calls it bare."""
        if self.verdict is Verdict.OFFLINE:
            raise LogDirOfflineError(
                f"log dir {self.log_dir} is offline ({op} refused)",
                log_dir=self.log_dir, op=op, path=self.log_dir, errno=None,
            )
        if writing and self.verdict is Verdict.SATURATED:
            raise LogDirSaturatedError(
                f"log dir {self.log_dir} is saturated ({op} refused)",
                log_dir=self.log_dir, op=op, path=self.log_dir, errno=None,
            )

    def translate(
        self, err: OSError, op: str, path: str | os.PathLike[str] | None = None
    ) -> LogStoreError:
        """Classify `err`, report a disk verdict, and return the typed error to raise."""
        where = os.fspath(path) if path is not None else (err.filename or self.log_dir)
        where = os.fspath(where)
        verdict = classify(err)
        detail = f"{op} on {where}: {err.strerror or err}"
        if verdict is Verdict.NONE:
            if err.errno in REQUEST_ERRNOS:
                return OperationRefusedError(f"{detail} (refused for what was asked, not a "
                                             "disk fault: the dir stays online)", op=op, path=where)
            return ResourceError(f"process resource exhausted during {detail}", op=op, path=where)
        if verdict is Verdict.SATURATED:
            probe_err = _probe_space(self.log_dir)
            if probe_err is not None:
                verdict = Verdict.OFFLINE
                detail += f" (space probe failed: {probe_err.strerror})"
        if not os.path.isdir(self.log_dir) and verdict is not Verdict.OFFLINE:
            verdict = Verdict.OFFLINE
            detail += " (log dir root is gone)"
        if self.channel is not None:
            self.channel.report(
                LogDirFailure(
                    log_dir=self.log_dir, verdict=verdict, op=op, path=where,
                    errno=err.errno, message=detail, time_ms=int(time.time() * 1000),
                )
            )
        cls: type[StorageError] = (
            LogDirSaturatedError if verdict is Verdict.SATURATED else LogDirOfflineError
        )
        return cls(
            f"log dir {self.log_dir} {verdict.value}: {detail}",
            log_dir=self.log_dir, op=op, path=where, errno=err.errno,
        )


class RetiredGuard(IoGuard):
    """The guard of a log moved to another log dir (a replica move): every call on it is
    refused with `LogMovedError` before any file is touched, so a call queued before the
    move ends harmlessly, and nothing about the move is ever taken for a disk's fault
    (no failure channel). `Log.retire` puts it in place; `Log.unretire` takes it back."""

    def __init__(self, previous: IoGuard, moved_to: str):
        super().__init__(previous.log_dir, None)
        self.previous = previous
        self.moved_to = moved_to
        self.verdict = Verdict.OFFLINE  # not ONLINE: the append and read paths ask first

    @contextmanager
    def io(self, op: str, path: str | os.PathLike[str] | None = None, *,
           writing: bool | None = None) -> Iterator[None]:
        self.check_usable(op, writing=True)
        yield  # never reached

    def check_usable(self, op: str, *, writing: bool) -> None:
        raise LogMovedError(f"{op} refused: this log was moved from {self.log_dir} to "
                            f"{self.moved_to}")

