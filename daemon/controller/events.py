"""The controller's events and the one thread that processes them (Kafka's
ControllerEventManager and ControllerEventThread).

Everything the controller does happens on this thread, one event at a time, in the
order the events were put: kazoo watch callbacks, session listeners, the per-broker
senders' responses and the API layer's CreateTopics/DeleteTopics only `put` an event
and return. An event whose processing raises is logged and handed to `on_error` (the
controller resigns on ControllerMovedError and moves the controller on anything else);
the thread carries on with the next event.

`put` may be called from any thread; `close` stops the thread after the event being
processed (events still queued are dropped, and their futures are cancelled).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("logkeeper.controller.events")


class ControllerEvent:
    """Base of every event; subclasses are small frozen records."""

    @property
    def name(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class Startup(ControllerEvent):
    pass


@dataclass(frozen=True)
class Expire(ControllerEvent):
    """Our ZooKeeper session is gone: resign."""


@dataclass(frozen=True)
class Reelect(ControllerEvent):
    """`/controller` was deleted, or a new session began: resign if we were active, elect."""


@dataclass(frozen=True)
class ControllerChange(ControllerEvent):
    """`/controller` was created or changed: resign if it no longer names us."""


@dataclass(frozen=True)
class BrokerChange(ControllerEvent):
    pass


@dataclass(frozen=True)
class TopicChange(ControllerEvent):
    pass


@dataclass(frozen=True)
class PartitionModifications(ControllerEvent):
    topic: str


@dataclass(frozen=True)
class TopicDeletion(ControllerEvent):
    pass


@dataclass(frozen=True)
class LogDirEventNotification(ControllerEvent):
    pass


@dataclass(frozen=True)
class IsrChangeNotification(ControllerEvent):
    pass


@dataclass(frozen=True)
class BrokerLogDirsChange(ControllerEvent):
    """A logkeeper broker wrote its dirs' state (`/logkeeper/brokers/<id>/log_dirs`)."""

    broker_id: int


@dataclass(frozen=True)
class ZkPartitionReassignment(ControllerEvent):
    """`/admin/reassign_partitions` was created or changed."""


@dataclass(frozen=True)
class PartitionReassignmentIsrChange(ControllerEvent):
    """The state znode of a partition being reassigned changed (Kafka's
    PartitionReassignmentIsrChangeHandler): its target may be in the ISR now."""

    tp: Any


@dataclass(frozen=True)
class LeaderAndIsrResponseReceived(ControllerEvent):
    broker_id: int
    broker_epoch: int  # the epoch the request was sent to
    response: Any


@dataclass(frozen=True)
class StopReplicaResponseReceived(ControllerEvent):
    broker_id: int
    broker_epoch: int
    request: Any
    response: Any


@dataclass(frozen=True)
class CreateTopics(ControllerEvent):
    """`topics`: `TopicSpec`s; the future gets {topic: TopicResult}."""

    topics: tuple[Any, ...]
    validate_only: bool = False
    future: Future = field(default_factory=Future, compare=False)


@dataclass(frozen=True)
class DeleteTopics(ControllerEvent):
    """The future gets {topic: error code} once each deletion has completed (or failed)."""

    topics: tuple[str, ...]
    future: Future = field(default_factory=Future, compare=False)


@dataclass(frozen=True)
class Call(ControllerEvent):
    """Run `fn()` on the event thread and put its result in the future (for tests and
    for readers that need a consistent view of the context)."""

    fn: Callable[[], Any]
    future: Future = field(default_factory=Future, compare=False)


class _Shutdown(ControllerEvent):
    pass


class ControllerEventManager:
    def __init__(self, process: Callable[[ControllerEvent], None],
                 on_error: Callable[[ControllerEvent, BaseException], None], name: str):
        self._process = process
        self._on_error = on_error
        self._queue: queue.Queue[ControllerEvent] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.processed = 0  # metric hooks: events done, the last one's time in seconds
        self.last_event_seconds = 0.0
        self.current: ControllerEvent | None = None

    def start(self) -> None:
        self._thread.start()

    def put(self, event: ControllerEvent) -> ControllerEvent:
        self._queue.put(event)
        return event

    @property
    def queue_size(self) -> int:
        return self._queue.qsize()

    def is_event_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def close(self, timeout: float = 10.0) -> None:
        self._queue.put(_Shutdown())
        if self._thread.is_alive() and not self.is_event_thread():
            self._thread.join(timeout)
        while True:  # what is left will never run
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                break
            fut = getattr(event, "future", None)
            if fut is not None:
                fut.cancel()

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if isinstance(event, _Shutdown):
                return
            self.current = event
            start = time.monotonic()
            try:
                self._process(event)
            except Exception as err:  # noqa: BLE001 - one event's failure must not end the thread
                try:
                    self._on_error(event, err)
                except Exception:  # noqa: BLE001 - nor may the handling of that failure
                    log.critical("controller event thread: handling the failure of %s failed",
                                 type(event).__name__, exc_info=True)
            finally:
                self.current = None
                self.processed += 1
                self.last_event_seconds = time.monotonic() - start
