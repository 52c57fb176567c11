"""Per-log settings, with Apache Kafka's defaults (topic-level names in comments)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    index_interval_bytes: int = 4096  # index.interval.bytes
    max_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms; -1 = forever
    retention_bytes: int = -1  # retention.bytes; -1 = no limit
    max_message_bytes: int = 1024 * 1024 + 12  # max.message.bytes (1048588)
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms
    compacted: bool = False  # cleanup.policy=compact: retention does not delete

    def __post_init__(self) -> None:
        checks = {
            "segment_bytes": self.segment_bytes >= 14,
            "segment_ms": self.segment_ms >= 1,
            "index_interval_bytes": self.index_interval_bytes >= 0,
            "max_index_bytes": self.max_index_bytes >= 12,
            "retention_ms": self.retention_ms >= -1,
            "retention_bytes": self.retention_bytes >= -1,
            "max_message_bytes": self.max_message_bytes >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"LogConfig.{name}={getattr(self, name)!r} is out of range")

    def replace(self, **changes: int) -> LogConfig:
        return dataclasses.replace(self, **changes)
