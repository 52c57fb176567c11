"""Watch log dirs with inotify (pyinotify): deletion, moves, unmounts, permission changes.

An event does not decide anything: it tells the daemon to probe that dir at once
instead of waiting for the next interval. inotify does not see a lazy unmount (`umount
-l`) while the daemon holds files there, and a path then names the directory
underneath; so the mount table (/proc/self/mountinfo, pollable) is watched too, and any
mount change reports every dir ("mounts-changed"): the probe's identity check tells.
The watcher runs pyinotify's notifier (and the mount watch) on its own threads and calls
`on_event(WatchEvent)` from there; the callback must not block (the daemon hands it to
its event loop). Errors adding a watch (a dir already gone)
are reported as an event too, never raised.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass

import pyinotify


class _MovedWatchNotice(logging.Filter):
    """pyinotify logs an ERROR block when a watched dir is moved outside the parents it
    watches ("... cannot be trusted anymore"): for us a moved log dir is an event we
    report ("moved") and act on, so that notice is debug detail, not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and "of this watch" in str(record.msg):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _tame_pyinotify_logging() -> None:
    """pyinotify adds its own stderr handler at import, so each of its records was
    printed twice under the daemon's logging (its format, then ours): records go
    through the application's handlers only, and the moved-dir notice is demoted."""
    logger = logging.getLogger("pyinotify")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    if not any(isinstance(f, _MovedWatchNotice) for f in logger.filters):
        logger.addFilter(_MovedWatchNotice())


_tame_pyinotify_logging()

# On the dir itself: it is deleted, moved, unmounted, or its mode/owner changes.
_SELF_MASK = (pyinotify.IN_DELETE_SELF | pyinotify.IN_MOVE_SELF | pyinotify.IN_UNMOUNT
              | pyinotify.IN_ATTRIB | pyinotify.IN_IGNORED)
# On its parent: an entry named like the dir is removed or moved away.
_PARENT_MASK = pyinotify.IN_DELETE | pyinotify.IN_MOVED_FROM | pyinotify.IN_ATTRIB


@dataclass(frozen=True)
class WatchEvent:
    log_dir: str
    reason: str  # "deleted", "moved", "unmounted", "attributes", "watch-lost", "unwatchable",
    # "mounts-changed"


class LogDirWatcher:
    def __init__(self, log_dirs: list[str], on_event: Callable[[WatchEvent], None]):
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.on_event = on_event
        self._wm = pyinotify.WatchManager()
        self._notifier = pyinotify.ThreadedNotifier(self._wm, self._handle)
        self._notifier.daemon = True
        self._by_parent: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._mounts = threading.Thread(target=self._watch_mounts, name="logkeeper-mounts",
                                        daemon=True)

    def start(self) -> None:
        for d in self.log_dirs:
            self.watch(d)
        self._notifier.start()
        self._mounts.start()

    def _watch_mounts(self, mountinfo: str = "/proc/self/mountinfo") -> None:
        try:
            f = open(mountinfo, "rb")  # noqa: SIM115 - held for the thread's life
        except OSError:
            return
        with f:
            poller = select.poll()
            poller.register(f, select.POLLPRI | select.POLLERR)
            f.read()
            while not self._stopped.is_set():
                if not poller.poll(200):
                    continue
                f.seek(0)
                f.read()  # re-arms the notification
                for d in self.log_dirs:
                    self.on_event(WatchEvent(d, "mounts-changed"))

    def watch(self, log_dir: str) -> None:
        """(Re)watch one dir, e.g. after an operator re-admits it."""
        log_dir = os.path.abspath(log_dir)
        added = self._wm.add_watch(log_dir, _SELF_MASK, quiet=True)
        if not added or added.get(log_dir, -1) < 0:
            self.on_event(WatchEvent(log_dir, "unwatchable"))
        parent = os.path.dirname(log_dir)
        with self._lock:
            first = parent not in self._by_parent
            self._by_parent.setdefault(parent, [])
            if log_dir not in self._by_parent[parent]:
                self._by_parent[parent].append(log_dir)
        if first:
            self._wm.add_watch(parent, _PARENT_MASK, quiet=True)

    def stop(self) -> None:
        """Stop both threads; no `on_event` call is made once this returns."""
        self._stopped.set()
        self._notifier.stop()
        if self._mounts.is_alive():
            self._mounts.join()  # it looks at the flag every 200 ms

    def _handle(self, event: pyinotify.Event) -> None:
        path = os.path.abspath(event.path)
        mask = event.mask
        if path in self.log_dirs and not event.name:
            reason = ("deleted" if mask & pyinotify.IN_DELETE_SELF else
                      "moved" if mask & pyinotify.IN_MOVE_SELF else
                      "unmounted" if mask & pyinotify.IN_UNMOUNT else
                      "watch-lost" if mask & pyinotify.IN_IGNORED else "attributes")
            self.on_event(WatchEvent(path, reason))
            return
        with self._lock:
            children = list(self._by_parent.get(path, ()))
        target = os.path.join(path, event.name) if event.name else path
        if target in children:
            reason = "attributes" if mask & pyinotify.IN_ATTRIB else (
                "moved" if mask & pyinotify.IN_MOVED_FROM else "deleted")
            self.on_event(WatchEvent(target, reason))
