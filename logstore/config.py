"""Per-log settings, with Apache Kafka's defaults (topic-level names in comments).

`compression.type` is `compression_type`: "producer" keeps each batch as its producer
compressed it; "uncompressed", "gzip", "snappy", "lz4" or "zstd" has a leader's append
recompress each batch that is in another codec (Kafka's LogValidator; see `Log.append`).
`message.timestamp.type` is `timestamp_type`: "CreateTime" keeps the producers'
timestamps; "LogAppendTime" has a leader's append stamp each batch with the time it was
written.

`cleanup.policy` is two fields: `compacted` (the policy names compact: the log cleaner
keeps the latest record per key, logstore.cleaner) and `compact_delete` (it names
delete as well: retention still deletes old segments of a compacted log). A policy of
delete alone is `compacted=False`; `LogConfig.policy_fields` maps Kafka's value to them.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable
from dataclasses import dataclass

# Kafka's BrokerCompressionType names, in Kafka's order.
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")  # message.timestamp.type
# The levels a codec takes (Kafka's compression.<codec>.level, KIP-390): (lowest,
# highest, default); gzip's -1 is zlib's default (6).
COMPRESSION_LEVELS = {"gzip": (1, 9, -1), "lz4": (1, 17, 9), "zstd": (-131072, 22, 3)}
LONG_MAX = 2**63 - 1  # Java's Long.MAX_VALUE: "no bound" in Kafka's configs


def compression_level_ok(codec: str, level: int) -> bool:
    lo, hi, default = COMPRESSION_LEVELS[codec]
    return lo <= level <= hi or level == default


def compression_level_range(codec: str) -> str:
    """The levels `codec` takes, as its configs' errors say them."""
    lo, hi, default = COMPRESSION_LEVELS[codec]
    return f"between {lo} and {hi}" + ("" if lo <= default <= hi else f" or {default}")


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    segment_jitter_ms: int = 0  # segment.jitter.ms: up to this much earlier, at random
    index_interval_bytes: int = 4096  # index.interval.bytes
    max_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms; -1 = forever
    retention_bytes: int = -1  # retention.bytes; -1 = no limit
    max_message_bytes: int = 1024 * 1024 + 12  # max.message.bytes (1048588)
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms
    # fsync the log once this many messages are unflushed (flush.messages), and once its
    # last flush is this old (flush.ms, checked by the daemon's flush scheduler); Kafka's
    # defaults never do (replication is the durability), the 60 s checkpoint round does.
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    compacted: bool = False  # cleanup.policy has compact: the cleaner compacts this log
    compact_delete: bool = False  # cleanup.policy=compact,delete: retention deletes too
    delete_retention_ms: int = 24 * 3600 * 1000  # delete.retention.ms: tombstones kept
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    compression_type: str = "producer"  # compression.type
    timestamp_type: str = "CreateTime"  # message.timestamp.type
    compression_gzip_level: int = -1  # compression.gzip.level
    compression_lz4_level: int = 9  # compression.lz4.level
    compression_zstd_level: int = 3  # compression.zstd.level
    # How far before or after the leader's clock a CreateTime timestamp may be
    # (message.timestamp.before.max.ms / after.max.ms; each left at Long.MAX_VALUE
    # falls back to the deprecated message.timestamp.difference.max.ms, as Kafka's).
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX
    timestamp_difference_max_ms: int = LONG_MAX

    def __post_init__(self) -> None:
        checks = {
            "segment_bytes": self.segment_bytes >= 14,
            "segment_ms": self.segment_ms >= 1,
            "segment_jitter_ms": self.segment_jitter_ms >= 0,
            "flush_messages": self.flush_messages >= 1,
            "flush_ms": self.flush_ms >= 0,
            "index_interval_bytes": self.index_interval_bytes >= 0,
            "max_index_bytes": self.max_index_bytes >= 4,
            "retention_ms": self.retention_ms >= -1,
            "retention_bytes": self.retention_bytes >= -1,
            "max_message_bytes": self.max_message_bytes >= 0,
            "delete_retention_ms": self.delete_retention_ms >= 0,
            "min_cleanable_dirty_ratio": 0 <= self.min_cleanable_dirty_ratio <= 1,
            "min_compaction_lag_ms": self.min_compaction_lag_ms >= 0,
            "max_compaction_lag_ms": self.max_compaction_lag_ms >= 1,
            "compression_type": self.compression_type in COMPRESSION_TYPES,
            "timestamp_type": self.timestamp_type in TIMESTAMP_TYPES,
            "compression_gzip_level": compression_level_ok("gzip", self.compression_gzip_level),
            "compression_lz4_level": compression_level_ok("lz4", self.compression_lz4_level),
            "compression_zstd_level": compression_level_ok("zstd", self.compression_zstd_level),
            "timestamp_before_max_ms": self.timestamp_before_max_ms >= 0,
            "timestamp_after_max_ms": self.timestamp_after_max_ms >= 0,
            "timestamp_difference_max_ms": self.timestamp_difference_max_ms >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"LogConfig.{name}={getattr(self, name)!r} is out of range")

    def replace(self, **changes: int | float | bool | str) -> LogConfig:
        return dataclasses.replace(self, **changes)

    def random_segment_jitter(self) -> int:
        """A new segment's roll jitter (Kafka's randomSegmentJitter): uniform below
        min(segment.jitter.ms, segment.ms), 0 without jitter."""
        if self.segment_jitter_ms == 0:
            return 0
        return random.randrange(min(self.segment_jitter_ms, self.segment_ms))

    @property
    def max_segment_ms(self) -> int:
        """The age a segment rolls at (Kafka's maxSegmentMs): segment.ms, or a compacted
        log's max.compaction.lag.ms when smaller, so the records of an active segment
        written to only now and then are not kept from the cleaner past that lag."""
        if self.compacted:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def compression_level(self) -> int | None:
        """The level compression.type's codec is written at (None: it has none)."""
        return {"gzip": self.compression_gzip_level, "lz4": self.compression_lz4_level,
                "zstd": self.compression_zstd_level}.get(self.compression_type)

    @property
    def leader_rewrites(self) -> bool:
        """Whether a leader's append rewrites batches (a codec, or LogAppendTime)."""
        return self.compression_type != "producer" or self.timestamp_type == "LogAppendTime"

    @property
    def timestamp_window(self) -> tuple[int, int] | None:
        """(before, after): how many ms before and after the leader's clock a CreateTime
        record's timestamp may be; None when any timestamp goes (LogAppendTime, or no
        bound set). Kafka's LogConfig getters: a bound left at Long.MAX_VALUE is
        message.timestamp.difference.max.ms."""
        if self.timestamp_type != "CreateTime":
            return None
        before, after = self.timestamp_before_max_ms, self.timestamp_after_max_ms
        if before == LONG_MAX:
            before = self.timestamp_difference_max_ms
        if after == LONG_MAX:
            after = self.timestamp_difference_max_ms
        return None if before == after == LONG_MAX else (before, after)

    @property
    def validates_records(self) -> bool:
        """Whether a leader's append reads each record first: a compacted topic's need
        keys, and timestamps may be bounded."""
        return self.compacted or self.timestamp_window is not None

    @property
    def retention_deletes(self) -> bool:
        """Whether retention deletes old segments (the policy names delete)."""
        return not self.compacted or self.compact_delete

    @property
    def cleanup_policy(self) -> str:
        """Kafka's cleanup.policy value for these fields."""
        if not self.compacted:
            return "delete"
        return "compact,delete" if self.compact_delete else "compact"

    @staticmethod
    def policy_fields(policy: str | Iterable[str]) -> dict[str, bool]:
        """`compacted` and `compact_delete` for a cleanup.policy ("delete", "compact",
        "compact,delete" or a list of those words)."""
        words = {w.strip() for w in (policy.split(",") if isinstance(policy, str) else policy)}
        compacted = "compact" in words
        return {"compacted": compacted, "compact_delete": compacted and "delete" in words}
