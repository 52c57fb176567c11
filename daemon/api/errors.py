"""The Kafka error codes the daemon answers with, and how its exceptions become codes.

Every code comes from `kafka.errors` (kafka-python's table of Kafka's Errors.java), so
no number is written out anywhere else in daemon/; docs/formats.md lists when each
one is sent. `error_of` is the one place an exception becomes a code: a logstore error
carries its own `error_code` (logstore cannot import the daemon), anything else is a
bug, answered UNKNOWN_SERVER_ERROR (-1) and logged with its traceback.
"""

from __future__ import annotations

import logging

import kafka.errors as ke

from logstore import LogStoreError, names
from logstore.errors import InvalidTopicError

log = logging.getLogger("logkeeper.errors")

NONE = ke.NoError.errno
UNKNOWN_SERVER_ERROR = ke.UnknownError.errno
OFFSET_OUT_OF_RANGE = ke.OffsetOutOfRangeError.errno
CORRUPT_MESSAGE = ke.CorruptRecordError.errno
UNKNOWN_TOPIC_OR_PARTITION = ke.UnknownTopicOrPartitionError.errno
LEADER_NOT_AVAILABLE = ke.LeaderNotAvailableError.errno
LISTENER_NOT_FOUND = ke.ListenerNotFoundError.errno
NOT_LEADER_OR_FOLLOWER = ke.NotLeaderForPartitionError.errno
MESSAGE_TOO_LARGE = ke.MessageSizeTooLargeError.errno
INVALID_TOPIC_EXCEPTION = ke.InvalidTopicError.errno
INVALID_REQUIRED_ACKS = ke.InvalidRequiredAcksError.errno
TOPIC_AUTHORIZATION_FAILED = ke.TopicAuthorizationFailedError.errno
CLUSTER_AUTHORIZATION_FAILED = ke.ClusterAuthorizationFailedError.errno
GROUP_AUTHORIZATION_FAILED = ke.GroupAuthorizationFailedError.errno
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = ke.TransactionalIdAuthorizationFailedError.errno
# What a transactional producer is told, at its first request for a transactional id.
UNSUPPORTED_VERSION = ke.UnsupportedVersionError.errno
TOPIC_ALREADY_EXISTS = ke.TopicAlreadyExistsError.errno
INVALID_PARTITIONS = ke.InvalidPartitionsError.errno
INVALID_REPLICATION_FACTOR = ke.InvalidReplicationFactorError.errno
MISMATCHED_ENDPOINT_TYPE = ke.MismatchedEndpointTypeError.errno
INVALID_REPLICA_ASSIGNMENT = ke.InvalidReplicationAssignmentError.errno
INVALID_CONFIG = ke.InvalidConfigurationError.errno
POLICY_VIOLATION = ke.PolicyViolationError.errno
INVALID_REQUEST = ke.InvalidRequestError.errno
UNKNOWN_TOPIC_ID = ke.UnknownTopicIdError.errno
INCONSISTENT_TOPIC_ID = ke.InconsistentTopicIdError.errno
OUT_OF_ORDER_SEQUENCE_NUMBER = ke.OutOfOrderSequenceNumberError.errno
INVALID_PRODUCER_EPOCH = ke.InvalidProducerEpochError.errno
INVALID_TXN_STATE = ke.InvalidTxnStateError.errno
INVALID_PRODUCER_ID_MAPPING = ke.InvalidProducerIdMappingError.errno
INVALID_TRANSACTION_TIMEOUT = ke.InvalidTransactionTimeoutError.errno
CONCURRENT_TRANSACTIONS = ke.ConcurrentTransactionsError.errno
TRANSACTION_COORDINATOR_FENCED = ke.TransactionCoordinatorFencedError.errno
PRODUCER_FENCED = ke.ProducerFencedError.errno
TRANSACTION_ABORTABLE = ke.TransactionAbortableError.errno
NETWORK_EXCEPTION = ke.NetworkExceptionError.errno
INVALID_RECORD = ke.InvalidRecordError.errno
TRANSACTIONAL_ID_NOT_FOUND = ke.TransactionalIdNotFoundError.errno
UNSTABLE_OFFSET_COMMIT = ke.UnstableOffsetCommitError.errno
OPERATION_NOT_ATTEMPTED = ke.OperationNotAttemptedError.errno
KAFKA_STORAGE_ERROR = ke.KafkaStorageError.errno
LOG_DIR_NOT_FOUND = ke.LogDirNotFoundError.errno
REPLICA_NOT_AVAILABLE = ke.ReplicaNotAvailableError.errno
FETCH_SESSION_ID_NOT_FOUND = ke.FetchSessionIdNotFoundError.errno
FENCED_LEADER_EPOCH = ke.FencedLeaderEpochError.errno
OFFSET_NOT_AVAILABLE = ke.OffsetNotAvailableError.errno
UNKNOWN_LEADER_EPOCH = ke.UnknownLeaderEpochError.errno
REQUEST_TIMED_OUT = ke.RequestTimedOutError.errno
COORDINATOR_NOT_AVAILABLE = ke.CoordinatorNotAvailableError.errno
NOT_ENOUGH_REPLICAS = ke.NotEnoughReplicasError.errno
NOT_ENOUGH_REPLICAS_AFTER_APPEND = ke.NotEnoughReplicasAfterAppendError.errno
STALE_CONTROLLER_EPOCH = ke.StaleControllerEpochError.errno
NOT_CONTROLLER = ke.NotControllerError.errno
ELECTION_NOT_NEEDED = ke.ElectionNotNeededError.errno
NO_REASSIGNMENT_IN_PROGRESS = ke.NoReassignmentInProgressError.errno
STALE_BROKER_EPOCH = ke.StaleBrokerEpochError.errno
RECORD_LIST_TOO_LARGE = ke.RecordListTooLargeError.errno
# Consumer groups and committed offsets (daemon.coordinator).
OFFSET_METADATA_TOO_LARGE = ke.OffsetMetadataTooLargeError.errno
COORDINATOR_LOAD_IN_PROGRESS = ke.CoordinatorLoadInProgressError.errno
NOT_COORDINATOR = ke.NotCoordinatorError.errno
ILLEGAL_GENERATION = ke.IllegalGenerationError.errno
INCONSISTENT_GROUP_PROTOCOL = ke.InconsistentGroupProtocolError.errno
INVALID_GROUP_ID = ke.InvalidGroupIdError.errno
UNKNOWN_MEMBER_ID = ke.UnknownMemberIdError.errno
INVALID_SESSION_TIMEOUT = ke.InvalidSessionTimeoutError.errno
REBALANCE_IN_PROGRESS = ke.RebalanceInProgressError.errno
INVALID_COMMIT_OFFSET_SIZE = ke.InvalidCommitOffsetSizeError.errno
NON_EMPTY_GROUP = ke.NonEmptyGroupError.errno
GROUP_ID_NOT_FOUND = ke.GroupIdNotFoundError.errno
GROUP_SUBSCRIBED_TO_TOPIC = ke.GroupSubscribedToTopicError.errno
MEMBER_ID_REQUIRED = ke.MemberIdRequiredError.errno
GROUP_MAX_SIZE_REACHED = ke.GroupMaxSizeReachedError.errno
FENCED_INSTANCE_ID = ke.FencedInstanceIdError.errno
SECURITY_DISABLED = ke.SecurityDisabledError.errno
UNSUPPORTED_COMPRESSION_TYPE = ke.UnsupportedCompressionTypeError.errno
TOPIC_DELETION_DISABLED = ke.TopicDeletionDisabledError.errno

# The Java exception names Kafka's own tools print for a code (kafka-log-dirs.sh's JSON
# "error" field); kafka-python's class names differ, so the few we report are listed.
JAVA_NAMES = {
    NONE: None,
    UNKNOWN_SERVER_ERROR: "UnknownServerException",
    TOPIC_AUTHORIZATION_FAILED: "TopicAuthorizationException",
    CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
    KAFKA_STORAGE_ERROR: "KafkaStorageException",
    LOG_DIR_NOT_FOUND: "LogDirNotFoundException",
    REPLICA_NOT_AVAILABLE: "ReplicaNotAvailableException",
    INVALID_TOPIC_EXCEPTION: "InvalidTopicException",
}


def unknown_topic_code(topic: str) -> int:
    """What Kafka answers for a topic it does not hold: 17 for an illegal name, else 3."""
    try:
        names.validate_topic(topic)
    except InvalidTopicError:
        return INVALID_TOPIC_EXCEPTION
    return UNKNOWN_TOPIC_OR_PARTITION


def java_name(code: int) -> str | None:
    """The name Kafka's tools print for `code` (None for no error)."""
    return JAVA_NAMES.get(code, f"KafkaError({code})")


# Kafka's Errors enum names where kafka-python's table spells them otherwise (older names).
_ENUM_NAMES = {
    UNKNOWN_SERVER_ERROR: "UNKNOWN_SERVER_ERROR",
    NONE: "NONE",
    ke.NotLeaderForPartitionError.errno: "NOT_LEADER_OR_FOLLOWER",
    ke.MessageSizeTooLargeError.errno: "MESSAGE_TOO_LARGE",
    INVALID_TOPIC_EXCEPTION: "INVALID_TOPIC_EXCEPTION",
}


def enum_name(code: int) -> str:
    """Kafka's Errors enum name for `code` (KAFKA_STORAGE_ERROR, NOT_LEADER_OR_FOLLOWER):
    the `error` label Kafka's RequestMetrics ErrorsPerSec carries."""
    name = _ENUM_NAMES.get(code)
    if name is None:
        cls = ke.for_code(code)
        name = cls.message if cls is not ke.UnknownError else f"UNKNOWN_CODE_{code}"
    return name


def name_of(code: int) -> str:
    """kafka-python's class name for `code`, for messages."""
    return ke.for_code(code).__name__


def error_of(err: BaseException, where: str) -> tuple[int, str]:
    """The Kafka code and message that answer `err`, raised while doing `where`."""
    if isinstance(err, LogStoreError):
        if err.error_code == UNKNOWN_SERVER_ERROR:
            log.error("%s: %s", where, err)
        return err.error_code, str(err)
    log.error("%s: unexpected %s", where, type(err).__name__, exc_info=err)
    return UNKNOWN_SERVER_ERROR, f"{type(err).__name__}: {err}"
