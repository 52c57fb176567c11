"""File and directory names of a Kafka log, as pure functions.

Every name logkeeper writes or parses goes through here, so a segment's 20-digit base
offset or a partition directory's `<topic>-<partition>` form is spelled in one place.
Bad names raise `InvalidTopicError`; parsers return None for names that are not theirs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from .errors import InvalidTopicError

MAX_TOPIC_LENGTH = 249
MAX_DIR_NAME = 255  # the longest file name Linux filesystems take (NAME_MAX)
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_SEGMENT_FILE = re.compile(r"(\d{20})(\.[a-z]+(?:\.[a-z]+)?)")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
META_PROPERTIES = "meta.properties"
LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})  # Kafka's Topic.isInternal
# A KRaft-mode Kafka broker keeps the cluster's metadata log in `__cluster_metadata-0`
# of its metadata log dir. It is not a topic: no client sees it, no one may create it.
CLUSTER_METADATA_TOPIC = "__cluster_metadata"


def is_internal(topic: str) -> bool:
    """Whether `topic` is one of Kafka's internal topics (clients may not produce to it)."""
    return topic in INTERNAL_TOPICS


def validate_topic(topic: str) -> str:
    """Return `topic` if Kafka allows it as a topic name, else raise InvalidTopicError."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError(f"topic name {topic!r} is empty or not a string")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is not allowed")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(
            f"topic name of {len(topic)} characters is longer than {MAX_TOPIC_LENGTH}"
        )
    if not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} has characters outside [a-zA-Z0-9._-]"
        )
    return topic


def creation_refused(topic: str) -> str | None:
    """Why Kafka refuses to create `topic` although its name is legal (Kafka's words),
    or None."""
    if topic == CLUSTER_METADATA_TOPIC:
        return f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited."
    return None


def collision(topic: str, existing: Iterable[str]) -> str | None:
    """A topic of `existing` whose name differs from `topic` only in '.' against '_'
    (Kafka's Topic.hasCollision: their metric names would be the same), or None."""
    key = topic.replace(".", "_")
    for other in existing:
        if other != topic and other.replace(".", "_") == key:
            return other
    return None


def partition_dir_name(topic: str, partition: int) -> str:
    validate_topic(topic)
    if not isinstance(partition, int) or partition < 0:
        raise InvalidTopicError(f"partition {partition!r} of {topic!r} is not a non-negative int")
    return f"{topic}-{partition}"


def future_dir_name(topic: str, partition: int, unique: str) -> str:
    """Where a replica being moved to this dir is copied: Kafka's
    `<topic>-<partition>.<unique id>-future`."""
    return f"{partition_dir_name(topic, partition)}.{unique}{FUTURE_DIR_SUFFIX}"


def delete_dir_name(topic: str, partition: int, unique: str) -> str:
    """What a partition dir is renamed to before it is removed: Kafka's
    `<topic>-<partition>.<unique id>-delete`, its topic cut short so that the name fits
    MAX_DIR_NAME (Kafka's logDeleteDirName: a 249-character topic is legal, and its
    delete name would not fit). Kafka's loader still parses what is left."""
    suffix = f"-{partition_dir_name(topic, partition).rpartition('-')[2]}.{unique}" \
             f"{DELETE_DIR_SUFFIX}"
    return topic[:max(0, MAX_DIR_NAME - len(suffix))] + suffix


def parse_future_dir(name: str) -> TopicPartition | None:
    """`<topic>-<partition>.<unique id>-future` -> TopicPartition; None for other names."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    stem, dot, _ = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
    return parse_partition_dir(stem) if dot else None


def parse_partition_dir(name: str) -> TopicPartition | None:
    """`<topic>-<partition>` -> TopicPartition; None for deleted/future dirs and other names."""
    if name.endswith(DELETE_DIR_SUFFIX) or name.endswith(FUTURE_DIR_SUFFIX):
        return None
    topic, sep, partition = name.rpartition("-")
    if not sep or not partition.isdigit() or (len(partition) > 1 and partition[0] == "0"):
        return None
    try:
        validate_topic(topic)
    except InvalidTopicError:
        return None
    return TopicPartition(topic, int(partition))


def offset_file_stem(offset: int) -> str:
    return f"{offset:020d}"


def log_file_name(base_offset: int) -> str:
    return offset_file_stem(base_offset) + LOG_SUFFIX


def index_file_name(base_offset: int) -> str:
    return offset_file_stem(base_offset) + INDEX_SUFFIX


def time_index_file_name(base_offset: int) -> str:
    return offset_file_stem(base_offset) + TIME_INDEX_SUFFIX


def parse_segment_file(name: str) -> tuple[int, str] | None:
    """`00000000000000000123.log` -> (123, ".log"); `...log.deleted` -> (123, ".log.deleted")."""
    match = _SEGMENT_FILE.fullmatch(name)
    if not match:
        return None
    return int(match.group(1)), match.group(2)
