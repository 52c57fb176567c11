"""What the admin commands ask of each partition's leader, as Kafka's admin client asks
it: ListOffsets (`logkeeper get-offsets`, the offsets `logkeeper groups` shows and
resets to) and DeleteRecords (`logkeeper delete-records`), one request per leader,
which the Metadata of the partitions' topics names.

Each call answers per partition: its offset, or why there is none (no such partition,
no leader right now, a leader that cannot be reached or that answered an error). A
broker that is down costs the partitions it leads, not the whole command. ListOffsets
is asked again, as Kafka's admin client asks it again until its timeout, where the
answer may change: a partition with no leader, an unreachable leader or a leader that
moved is looked up again in fresh Metadata, and one whose leader answered another
retriable error (OFFSET_NOT_AVAILABLE while a new leader's high watermark catches up,
KAFKA_STORAGE_ERROR while a replica moves) is asked again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import kafka.errors as ke
from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from ..api import errors
from .client import ClientError, Connection, connect_any, metadata

TP = tuple[str, int]
EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -3, -4, -5
# The lowest ListOffsets version that can ask each special timestamp (Kafka's
# ListOffsetsRequest): asking an older broker for it fails instead of being misread.
_VERSION_FOR = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
# How long ListOffsets is asked again: Kafka's admin client default.api.timeout.ms, what
# kafka-get-offsets.sh waits for (kafka-consumer-groups.sh passes its --timeout, 5 s).
API_TIMEOUT_S = 60.0
# Kafka's retry.backoff.ms and retry.backoff.max.ms: the pause before each round of asking
# again doubles from the first to the second.
RETRY_BACKOFF_S, RETRY_BACKOFF_MAX_S = 0.1, 1.0


def error_text(code: int, message: str | None = None) -> str:
    """An error answered for a partition, as the operator reads it: Kafka's error name
    and the broker's message (else the error's own description)."""
    err = ke.for_code(code)
    return f"{err.__name__} ({code}): {message or err.description}"


def by_leader(meta: Any, tps: Iterable[TP]) -> tuple[dict[tuple[str, int], list[TP]], dict[TP, str]]:
    """`tps` grouped by the address of their leader, as `meta` (the Metadata of their
    topics) names it; and why each of the others has none."""
    address = {b.node_id: (b.host, b.port) for b in meta.brokers}
    topic_error = {t.name: t.error_code for t in meta.topics if t.error_code}
    leader = {(t.name, p.partition_index): p.leader_id for t in meta.topics for p in t.partitions}
    groups: dict[tuple[str, int], list[TP]] = {}
    problems: dict[TP, str] = {}
    for tp in sorted(set(tps)):
        if tp not in leader:
            problems[tp] = error_text(topic_error.get(tp[0], errors.UNKNOWN_TOPIC_OR_PARTITION))
        elif leader[tp] not in address:
            problems[tp] = error_text(errors.LEADER_NOT_AVAILABLE,
                                      "the partition has no leader right now")
        else:
            groups.setdefault(address[leader[tp]], []).append(tp)
    return groups, problems


def _by_topic(tps: Iterable[TP]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for t, p in tps:
        topics.setdefault(t, []).append(p)
    return topics


def _at_leaders(meta: Any, tps: Iterable[TP], ask: Callable[[Connection, list[TP]], Any], *,
                explain: Callable[[TP, int], str | None] = lambda tp, code: None,
                socket_timeout: float = 10.0, bootstrap: str | None = None,
                timeout_s: float = 0.0) -> tuple[dict[TP, int], dict[TP, str]]:
    """`ask(conn, partitions)` of each leader, which answers [(tp, error code, value)]:
    (the values, the problems) per partition; `explain(tp, code)` may say more of an
    error than its description. The socket waits `socket_timeout` for an answer. With a
    `bootstrap` to ask for fresh Metadata, the partitions whose problem may pass (see the
    module's docstring) are asked again, with a growing pause between rounds, for up to
    `timeout_s`; what is still wrong then is the problem reported."""
    deadline = time.monotonic() + timeout_s
    backoff = RETRY_BACKOFF_S
    values: dict[TP, int] = {}
    settled: dict[TP, str] = {}  # problems that asking again would not change
    pending = sorted(set(tps))
    while True:
        groups, problems = by_leader(meta, pending)
        # Kafka's admin client fails a partition of a topic the Metadata does not know at
        # once, and looks again for one with no leader (or not listed) in a known topic.
        gone = {t.name for t in meta.topics if t.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION}
        again = {tp for tp in problems if tp[0] not in gone}
        for (host, port), parts in groups.items():
            try:
                with Connection(host, port, timeout=socket_timeout) as conn:
                    answers = ask(conn, parts)
            except ClientError as err:
                problems.update({tp: str(err) for tp in parts})
                again.update(parts)
                continue
            for tp, code, value in answers:
                if code:
                    problems[tp] = error_text(code, explain(tp, code))
                    if ke.for_code(code).retriable:
                        again.add(tp)
                else:
                    values[tp] = value
        settled.update((tp, why) for tp, why in problems.items() if tp not in again)
        remaining = deadline - time.monotonic()
        if not again or bootstrap is None or remaining <= 0:
            return values, {**settled, **{tp: problems[tp] for tp in again}}
        time.sleep(min(backoff, remaining))  # a last round at the deadline
        backoff = min(2 * backoff, RETRY_BACKOFF_MAX_S)
        pending = sorted(again)
        try:
            with connect_any(bootstrap, timeout=socket_timeout) as conn:
                meta = metadata(conn, sorted({t for t, _ in pending}))
        except ClientError:
            pass  # no broker answered: ask the leaders the last Metadata named again


def list_offsets(meta: Any, tps: Iterable[TP], timestamp: int = LATEST, *,
                 bootstrap: str | None = None, timeout_s: float = API_TIMEOUT_S
                 ) -> tuple[dict[TP, int], dict[TP, str]]:
    """Each partition's log end offset (LATEST), log start offset (EARLIEST), the offset
    of its newest timestamp (MAX_TIMESTAMP) or of its first record at or after a time (ms;
    -1 when there is none), as a consumer sees them; and why the others have none. With
    a `bootstrap`, a partition whose answer may change is asked again for up to
    `timeout_s` (see the module's docstring)."""
    T = ListOffsetsRequest.ListOffsetsTopic

    def ask(conn: Connection, parts: list[TP]) -> list[tuple[TP, int, int]]:
        resp = conn.call(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            T(name=t, partitions=[T.ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                                  for p in ps]) for t, ps in _by_topic(parts).items()]),
            ListOffsetsResponse, lo=_VERSION_FOR.get(timestamp, 1), hi=9)
        return [((t.name, p.partition_index), p.error_code, p.offset)
                for t in resp.topics for p in t.partitions]

    return _at_leaders(meta, tps, ask, bootstrap=bootstrap, timeout_s=timeout_s)


def delete_records(meta: Any, before: dict[TP, int], timeout_ms: int
                   ) -> tuple[dict[TP, int], dict[TP, str]]:
    """Delete each partition's records below its offset in `before` (-1: its high
    watermark): each one's new log start offset (Kafka's low watermark), and why the
    others failed, deleting nothing there; or, a timeout, deleted on the leader only:
    a replica on a live broker had not followed within `timeout_ms` (the leader holds
    the answer that long, so the socket waits longer)."""
    T = DeleteRecordsRequest.DeleteRecordsTopic

    def explain(tp: TP, code: int) -> str | None:
        if code != errors.REQUEST_TIMED_OUT:
            return None
        to = "the high watermark" if before[tp] == -1 else before[tp]
        return (f"deleted on the leader, but not every replica on a live broker had moved "
                f"its log start offset to {to} within {timeout_ms} ms (a follower stopped "
                "or behind); they follow when they fetch again: ask again to know")

    def ask(conn: Connection, parts: list[TP]) -> list[tuple[TP, int, int]]:
        resp = conn.call(DeleteRecordsRequest(timeout_ms=timeout_ms, topics=[
            T(name=t, partitions=[T.DeleteRecordsPartition(partition_index=p, offset=before[(t, p)])
                                  for p in ps]) for t, ps in _by_topic(parts).items()]),
            DeleteRecordsResponse, lo=0, hi=2)
        return [((t.name, p.partition_index), p.error_code, p.low_watermark)
                for t in resp.topics for p in t.partitions]

    return _at_leaders(meta, before, ask, explain=explain,
                       socket_timeout=max(timeout_ms, 0) / 1000 + 10)
