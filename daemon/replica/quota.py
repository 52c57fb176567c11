"""Replication throttles: a leader's and a follower's byte-rate quota on the replicas an
operator marks (Kafka's ReplicationQuotaManager, KIP-73; docs/cluster.md "Replication
throttles").

What is throttled is named per topic, by two topic configs listing replicas as
`partition:broker` (or `*`, every replica of the topic):
- `leader.replication.throttled.replicas`: on the brokers named, a leader answering a
  follower's Fetch for such a partition leaves its records out while the leader quota is
  exceeded and the follower is not in the ISR;
- `follower.replication.throttled.replicas`: on the brokers named, a follower leaves
  such a partition out of its Fetch while the follower quota is exceeded and it has not
  caught up with its leader.
The bounds are the dynamic broker configs `leader.replication.throttled.rate` and
`follower.replication.throttled.rate` (bytes per second, unbounded by default). Bytes of
throttled partitions count against the quota whether or not they were held back
(Kafka records every throttled partition's bytes), so an in-sync replica's traffic
slows the catching-up ones, never itself.

A third quota caps the copying of replica moves between this broker's own log dirs
(KIP-113; daemon.replica.moves): the dynamic broker config
`replica.alter.log.dirs.io.max.bytes.per.second`, over every move at once, measured over
`alter.log.dirs.replication.quota.window.*`. A move waits while it is exceeded.

The rate is Kafka's `Rate` over `replication.quota.window.num` samples of
`replication.quota.window.size.seconds`: the bytes of the samples not expired, divided
by the time they span, counted as at least all but one whole window. A new quota thus
lets about (samples - 1) windows' worth through before it holds anything back, as
Kafka's does, and averages over the whole window after.

Event loop only (the leader's fetch handler and the fetchers run there)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from logstore import TopicPartition

UNBOUNDED = 2**63 - 1  # Kafka's Long.MAX_VALUE: no throttle
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
ALL_REPLICAS = "*"

log = logging.getLogger("logkeeper.quota")


class ThrottledReplicasError(ValueError):
    """A throttled-replicas list that is neither `*` nor `partition:broker` pairs."""


def parse_throttled_replicas(name: str, text: str) -> tuple[str, ...]:
    """Kafka's ThrottledReplicaListValidator: `*` alone, or a comma list of
    `partition:broker` (both non-negative integers); spaces around items are allowed.
    The items, trimmed."""
    items = tuple(i.strip() for i in text.split(",") if i.strip())
    if items == (ALL_REPLICAS,):
        return items
    for item in items:
        p, sep, b = item.partition(":")
        if not (sep and p.isdigit() and b.isdigit()):
            raise ThrottledReplicasError(
                f"Invalid value {text} for configuration {name}: must be the literal '*' "
                f"or a list of replicas in the following format: "
                f"[partitionId]:[brokerId],[partitionId]:[brokerId],...")
    return items


def partitions_on(items: Iterable[str], broker_id: int) -> frozenset[int] | None:
    """The partitions whose replica on `broker_id` the list names; None for `*`."""
    out = set()
    for item in items:
        if item == ALL_REPLICAS:
            return None
        p, _, b = item.partition(":")
        if int(b) == broker_id:
            out.add(int(p))
    return frozenset(out)


@dataclass
class _Sample:
    start: float  # seconds (the monotonic clock)
    value: float = 0.0


@dataclass
class Rate:
    """Kafka's Rate over a SampledStat: bytes per second over `samples` windows."""

    samples: int = 11
    window_s: float = 1.0
    _samples: list[_Sample] = field(default_factory=list)
    _current: int = 0

    def record(self, value: float, now: float) -> None:
        if not self._samples:
            self._samples.append(_Sample(now))
        sample = self._samples[self._current]
        if now - sample.start >= self.window_s:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._samples):
                self._samples.append(_Sample(now))
            else:
                self._samples[self._current] = _Sample(now)
            sample = self._samples[self._current]
        sample.value += value

    def measure(self, now: float) -> float:
        if not self._samples:
            return 0.0
        elapsed = self.window(now)
        return sum(s.value for s in self._samples) / elapsed

    def window(self, now: float) -> float:
        """The seconds the rate divides by: from the oldest sample not expired to now,
        at least all but one whole window (Kafka's Rate.windowSize)."""
        expire = self.samples * self.window_s
        for s in self._samples:
            if now - s.start >= expire:
                s.start, s.value = now, 0.0
        oldest = min((s.start for s in self._samples), default=now)
        elapsed = now - oldest
        full = int(elapsed / self.window_s)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_s
        return max(elapsed, 0.001)


class ReplicationQuota:
    """One side's quota (leader or follower): its bound, the partitions it throttles
    here, and the rate of their bytes."""

    def __init__(self, side: str, *, samples: int = 11, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.side = side
        self.bound = UNBOUNDED
        self.throttled: dict[str, frozenset[int] | None] = {}  # topic -> partitions (None: all)
        self._rate = Rate(samples, window_s)
        self._clock = clock

    def is_throttled(self, tp: TopicPartition) -> bool:
        if tp.topic not in self.throttled:
            return False
        parts = self.throttled[tp.topic]
        return parts is None or tp.partition in parts

    def is_exceeded(self) -> bool:
        return self.bound < UNBOUNDED and self._rate.measure(self._clock()) > self.bound

    def record(self, nbytes: int) -> None:
        if nbytes:
            self._rate.record(nbytes, self._clock())

    def rate(self) -> float:
        """Bytes per second of throttled partitions, as the quota measures them."""
        return self._rate.measure(self._clock())


class ReplicationQuotas:
    """The leader's and the follower's quota of this broker, kept in step with the
    topic configs and dynamic broker configs (`configure`)."""

    def __init__(self, broker_id: int, *, samples: int = 11, window_s: float = 1.0,
                 moves_samples: int = 11, moves_window_s: float = 1.0):
        self.broker_id = broker_id
        self.leader = ReplicationQuota("leader", samples=samples, window_s=window_s)
        self.follower = ReplicationQuota("follower", samples=samples, window_s=window_s)
        self.alter_log_dirs = ReplicationQuota("alter-log-dirs", samples=moves_samples,
                                               window_s=moves_window_s)

    def configure(self, topic_overrides: Mapping[str, Mapping[str, str]],
                  rate_of: Callable[[str], int]) -> None:
        """Throttle what the topics' overrides name for this broker, at the rates
        `rate_of(LEADER_RATE)` and `rate_of(FOLLOWER_RATE)`, and the replica moves at
        `rate_of(ALTER_LOG_DIRS_RATE)` (UNBOUNDED: none)."""
        for quota, key, rate_key in ((self.leader, LEADER_REPLICAS, LEADER_RATE),
                                     (self.follower, FOLLOWER_REPLICAS, FOLLOWER_RATE)):
            throttled: dict[str, frozenset[int] | None] = {}
            for topic, overrides in topic_overrides.items():
                text = overrides.get(key)
                if not text:
                    continue
                try:
                    items = parse_throttled_replicas(key, text)
                except ThrottledReplicasError as err:  # a znode edited by hand: not ours
                    log.warning("topic %s: %s; not throttled", topic, err)
                    continue
                parts = partitions_on(items, self.broker_id)
                if parts is None or parts:
                    throttled[topic] = parts
            quota.throttled = throttled
            quota.bound = rate_of(rate_key)
        self.alter_log_dirs.bound = rate_of(ALTER_LOG_DIRS_RATE)
