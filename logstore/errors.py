"""Typed errors of the log store, each carrying the Kafka protocol error code it maps to.

Two families: errors of the input (a corrupt or oversized batch, an illegal topic
name, an offset out of range) that change nothing on disk; and `StorageError`, a
failure caused by the disk under a log dir, raised only by that dir's IoGuard
(logstore.failure) after it has classified the OSError and told the failure channel.
"""

from __future__ import annotations

import enum


class Verdict(enum.Enum):
    """What an OSError says about the disk it came from."""

    NONE = "none"  # not the disk's fault (EMFILE, ENOMEM...) or not a disk error at all
    SATURATED = "saturated"  # out of space or quota: reads and deletes still work
    OFFLINE = "offline"  # the disk cannot be trusted any more


class LogStoreError(Exception):
    """Base of every error this package raises on purpose."""

    error_code = -1  # UNKNOWN_SERVER_ERROR


class CorruptRecordError(LogStoreError):
    """A record batch failed its framing or CRC check; nothing was written."""

    error_code = 2

    def __init__(self, message: str, *, position: int | None = None, reason: str = ""):
        super().__init__(message)
        self.position = position
        self.reason = reason or message


class UnexpectedAppendOffsetError(CorruptRecordError):
    """A follower's append (offsets kept as the leader assigned them) whose first batch
    starts below the log end: records this log already holds (Kafka's
    UnexpectedAppendOffsetException); nothing was written."""

    def __init__(self, message: str, *, first_offset: int, log_end_offset: int,
                 position: int | None = None):
        super().__init__(message, position=position, reason="offset below log end")
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


class InvalidRecordError(LogStoreError):
    """Records the log refuses (a record without a key for a compacted topic); nothing
    was written. `record_errors`: (the record's index in its batch, why) for each, as
    Kafka's Produce answer lists them."""

    error_code = 87  # INVALID_RECORD

    def __init__(self, message: str, *, record_errors: list[tuple[int, str]] | None = None):
        super().__init__(message)
        self.record_errors = record_errors or []


class InvalidTimestampError(InvalidRecordError):
    """A CreateTime timestamp outside message.timestamp.before/after.max.ms of now."""

    error_code = 32  # INVALID_TIMESTAMP


class UnsupportedCodecError(LogStoreError):
    """A compressed batch whose codec library is not installed."""

    error_code = 76  # UNSUPPORTED_COMPRESSION_TYPE


class RecordTooLargeError(LogStoreError):
    error_code = 10  # MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(LogStoreError):
    """The batches of one append, together, over segment.bytes: no segment could hold
    them (Kafka's RecordBatchTooLargeException in UnifiedLog.append)."""

    error_code = 18  # RECORD_LIST_TOO_LARGE


class InvalidTopicError(LogStoreError, ValueError):
    error_code = 17


class OffsetOutOfRangeError(LogStoreError):
    error_code = 1


class LogDirNotFoundError(LogStoreError):
    error_code = 57


class CheckpointError(LogStoreError):
    """A checkpoint or properties file that does not parse; names the file and line."""


class IndexFullError(LogStoreError):
    """An index has no room for another entry: the log's own limit, never a disk's fault.

    The log rolls before an append that would need more entries than the active
    segment's indexes hold, so this only surfaces from misuse of an index directly.
    """


class LogDirLockedError(LogStoreError):
    """Another process holds the log dir's .lock."""


class NoVerdictError(LogStoreError):
    """An OSError on a log dir's files that says nothing about its disk (IoGuard reports
    no verdict): the failed operation `op` on `path`."""

    def __init__(self, message: str, *, op: str = "", path: str = ""):
        super().__init__(message)
        self.op = op
        self.path = path


class ResourceError(NoVerdictError):
    """The process ran out of something (file descriptors, memory): not the disk's fault."""


class OperationRefusedError(NoVerdictError):
    """The kernel refused a call for what it asked (EINVAL: an argument it does not take;
    ENAMETOOLONG: a name past NAME_MAX): a fault of the request or of our code, which
    says nothing about the disk. Answered UNKNOWN_SERVER_ERROR, and logged as an error."""


class StorageError(LogStoreError):
    """A log dir's disk failed an operation; the dir's state must change."""

    error_code = 56  # KAFKA_STORAGE_ERROR
    verdict = Verdict.OFFLINE

    def __init__(self, message: str, *, log_dir: str, op: str, path: str, errno: int | None):
        super().__init__(message)
        self.log_dir = log_dir
        self.op = op
        self.path = path
        self.errno = errno


class LogMovedError(LogStoreError):
    """A call on a log that was moved to another log dir of this broker (a replica
    move, AlterReplicaLogDirs): nothing was touched. The partition is served from its
    new dir; a client or follower asking again reaches it (NOT_LEADER_OR_FOLLOWER is
    what Kafka answers while a partition changes hands)."""

    error_code = 6  # NOT_LEADER_OR_FOLLOWER: retriable


class LogDirOfflineError(StorageError):
    verdict = Verdict.OFFLINE


class LogDirSaturatedError(StorageError):
    verdict = Verdict.SATURATED
