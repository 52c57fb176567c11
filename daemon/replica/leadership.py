"""Who leads each partition held here, and what that means for its high watermark.

This is the one place the daemon decides leadership; everything else asks it. Today
there is one answer, `Standalone` (no `zookeeper.connect`): the
broker is a one-broker cluster that leads every partition it holds, its replica set and
ISR are itself, the high watermark is the log end offset (HW = LEO, so acks=all is the
same as acks=1), and a partition whose log dir is offline has no leader. The cluster
work replaces this class with one that answers from LeaderAndIsr and the metadata cache.

Thread-safety: `high_watermark` runs on a partition's dir worker (it reads the log);
everything else is called on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from logstore import Log

from .partition import Partition


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's leadership as Metadata reports it; leader -1 when it has none."""

    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]


class Standalone:
    """This broker leads every partition it holds; the ISR is itself."""

    def __init__(self, broker_id: int):
        self.broker_id = broker_id

    @property
    def controller_id(self) -> int:
        return self.broker_id

    def live_brokers(self) -> list[int]:
        """The brokers Metadata lists and topics may be placed on."""
        return [self.broker_id]

    def is_leader(self, p: Partition) -> bool:
        """Whether produce and consumer fetch requests for `p` are served here."""
        return True

    def state(self, p: Partition) -> LeaderAndIsr:
        me = [self.broker_id]
        if p.offline:
            # As a Kafka controller reports a partition whose only replica is offline:
            # no leader, the replica listed offline.
            return LeaderAndIsr(-1, 0, me, me, me)
        return LeaderAndIsr(self.broker_id, 0, me, me, [])

    def high_watermark(self, log: Log) -> int:
        """On `log`'s dir worker, after an append or when the log is taken on: the high
        watermark to set. Standalone: the ISR is this broker alone, so HW = LEO."""
        return log.log_end_offset
