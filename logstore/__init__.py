"""Kafka's on-disk log format: record batches, segments, indexes, logs, log dirs.

Public API (tools and the daemon rely on these names):

    from logstore import Log, LogConfig
    log = Log.open(partition_dir, LogConfig(...))  # recovers when not cleanly closed
    info = log.append(batch_bytes, leader_epoch=-1)
    data = log.read(offset, max_bytes)
    log.roll(); log.flush(); log.close(); log.apply_retention(); log.truncate_to(offset)

Errors: input errors (`CorruptRecordError`, `RecordTooLargeError`, `RecordBatchTooLargeError`,
`InvalidTopicError`, `OffsetOutOfRangeError`) change nothing on disk; disk failures surface as
`StorageError` subclasses raised by the log dir's IoGuard (logstore.failure), which has
already classified the OSError and reported it to the failure channel.
"""

from .config import LogConfig
from .errors import (
    CheckpointError,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTopicError,
    LogDirLockedError,
    LogDirOfflineError,
    LogDirSaturatedError,
    LogMovedError,
    LogStoreError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
    Verdict,
)
from .failure import FailureChannel, IoGuard, LogDirFailure
from .log import AppendInfo, Log, RecoveryResult
from .logdir import LogDir
from .names import TopicPartition

__all__ = [
    "AppendInfo", "CheckpointError", "CorruptRecordError", "FailureChannel", "InvalidRecordError",
    "InvalidTimestampError", "InvalidTopicError",
    "IoGuard", "Log", "LogConfig", "LogDir", "LogDirFailure", "LogDirLockedError",
    "LogDirOfflineError", "LogDirSaturatedError", "LogMovedError",
    "LogStoreError", "OffsetOutOfRangeError", "RecordBatchTooLargeError", "RecordTooLargeError",
    "RecoveryResult",
    "StorageError", "TopicPartition", "UnexpectedAppendOffsetError", "Verdict",
]
