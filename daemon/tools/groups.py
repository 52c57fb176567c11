"""`logkeeper groups`: what Kafka's `kafka-consumer-groups.sh` does, through the Kafka
protocol.

    logkeeper groups list [--state [S1,S2]] [--json]
    logkeeper groups describe (--group G ... | --all-groups) [--offsets | --members
        [--verbose] | --state] [--json]
    logkeeper groups reset-offsets --group G (--topic T[:P,P...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N |
         --to-datetime T | --by-duration D | --from-file CSV) [--execute | --dry-run]
        [--export]
    logkeeper groups delete --group G
    logkeeper groups delete-offsets --group G --topic T[:P,P...] ...

`list` asks every broker (each coordinator knows its own groups: ListGroups); with
`--state` it prints each group's state, and only those in the states named, as Kafka's.
Both list consumer groups only, as Kafka's tool does: a group of another protocol type
(Karapace's "sr", Kafka Connect's "connect") is left out, and `describe` refuses one in
Kafka's words ("GroupId G is not a consumer group (sr).", exit 1).
`describe` prints, per partition the group committed or was assigned, its committed
offset, the partition's log end offset (ListOffsets at the partition's leader) and the
lag, with the member that holds it (DescribeGroups at the group's coordinator, found with
FindCoordinator); a group with no members says so, as Kafka's does. `--members` prints
each member instead (host, client id, partition count; `--verbose` the partitions),
`--state` the group's coordinator, assignor, state and member count; several `--group`s
or `--all-groups` (every consumer group) print one block each, and a rebalancing group
is warned about on stderr, as Kafka's tool does. `reset-offsets`
commits new offsets for a group with no members (the consumers stopped), and without
`--execute` only prints what it would commit. Its partitions are those of each `--topic`
(repeatable; `T:0,2` for some), every one the group has an offset for
(`--all-topics`), or those of `--from-file`, the CSV (`topic,partition,offset` lines)
that `--export` prints instead of the table: a group's offsets saved and put back
later, as with kafka-consumer-groups.sh. `delete` removes an empty group and its
committed offsets (DeleteGroups); `delete-offsets` removes only those of the topics
named (OffsetDelete), refused for a topic the group's members subscribe to, and prints
kafka-consumer-groups.sh's table of each partition's status (exit 1 when any failed).

The broker asked first is `--bootstrap-server`, else the listener of the daemon on this
host (`--config FILE`, or the embedded defaults).

Exit codes: 0 done; 1 the broker refused (the error code, its name and message; nothing
changed), the group does not exist, or for `list` a broker did not answer (named; the
groups it coordinates are missing from the list); 2 a usage error, a bad config file, or
no broker reachable.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import kafka.errors as ke
from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment
from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from ..api import errors
from .client import (
    ClientError,
    Connection,
    Refused,
    add_command,
    bootstrap_of,
    connect_any,
    metadata,
)
from .leaders import EARLIEST, LATEST, list_offsets

# A coordinator still loading its offsets partition, or one not elected yet (the first
# FindCoordinator creates __consumer_offsets): asked again this often, this long.
COORDINATOR_WAIT_S = 15.0
COORDINATOR_NOT_READY = frozenset((errors.COORDINATOR_NOT_AVAILABLE,
                                   errors.COORDINATOR_LOAD_IN_PROGRESS, errors.NOT_COORDINATOR))


def coordinator(bootstrap: str, group: str) -> Connection:
    """A connection to `group`'s coordinator (the leader of its __consumer_offsets
    partition)."""
    def find() -> Any:
        with connect_any(bootstrap) as conn:
            return conn.call(FindCoordinatorRequest(key=group, key_type=0),
                             FindCoordinatorResponse, lo=0, hi=3)

    resp = _until_ready(find, lambda r: (r.error_code,), COORDINATOR_NOT_READY)
    if resp.error_code:
        raise Refused(resp.error_code, getattr(resp, "error_message", None))
    conn = Connection(resp.host, resp.port)
    conn.node_id = resp.node_id
    return conn


def _until_ready(ask: Callable[[], Any], codes: Callable[[Any], Iterable[int]],
                 not_ready: frozenset[int]) -> Any:
    """`ask()`'s answer, asked again while one of its error codes (`codes(answer)`) says
    the coordinator is not ready yet (`not_ready`), for up to COORDINATOR_WAIT_S."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        resp = ask()
        if not not_ready.intersection(codes(resp)) or time.monotonic() > deadline:
            return resp
        time.sleep(0.2)


_LOADING = frozenset((errors.COORDINATOR_LOAD_IN_PROGRESS,))


def _ask(conn: Connection, build: Callable[[], Any], response_cls: Any, lo: int, hi: int,
         codes: Callable[[Any], Iterable[int]]) -> Any:
    """`build()`'s request at the group's coordinator, asked again while the coordinator
    is still loading the group's offsets partition (COORDINATOR_LOAD_IN_PROGRESS, which
    Kafka's admin client retries too: a broker just started or just made leader of the
    partition answers it for as long as the load takes). `codes(answer)`: the answer's
    error codes."""
    return _until_ready(lambda: conn.call(build(), response_cls, lo=lo, hi=hi), codes,
                        _LOADING)


# The protocol types of consumer groups: a consumer's ("consumer") and none, a group
# that only has offsets committed (Kafka's ConsumerProtocol.PROTOCOL_TYPE and "").
CONSUMER_PROTOCOL_TYPES = ("consumer", "")


class NotConsumerGroup(Exception):
    """A group of another protocol (Karapace's "sr" election group, Kafka Connect's
    "connect" workers): Kafka's admin client refuses to describe it as a consumer group,
    in Kafka's words."""

    def __init__(self, group: str, protocol_type: str):
        super().__init__(f"GroupId {group} is not a consumer group ({protocol_type}).")


def list_groups(bootstrap: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Every consumer group any broker coordinates, [{"group", "state",
    "protocol_type"}], and what each broker that could not say answered (its groups are
    missing). Groups of other protocols are left out, as Kafka's listConsumerGroups
    leaves them out of kafka-consumer-groups.sh --list."""
    with connect_any(bootstrap) as conn:
        brokers = [(b.node_id, b.host, b.port) for b in metadata(conn, []).brokers]
    found: dict[str, dict[str, Any]] = {}
    failed = []
    for node, host, port in brokers:
        try:
            with Connection(host, port) as conn:
                resp = conn.call(ListGroupsRequest(states_filter=[]), ListGroupsResponse,
                                 lo=0, hi=4)
        except ClientError as err:
            failed.append(f"broker {node}: {err}")
            continue
        if resp.error_code:
            failed.append(f"broker {node}: {Refused(resp.error_code, 'ListGroups')}")
            continue
        for g in resp.groups:
            if g.protocol_type in CONSUMER_PROTOCOL_TYPES:
                found[g.group_id] = {"group": g.group_id, "protocol_type": g.protocol_type,
                                     "state": getattr(g, "group_state", None)}
    return [found[g] for g in sorted(found)], failed


# How long a partition's offsets are asked again while its leader moves or catches up:
# kafka-consumer-groups.sh's --timeout default.
OFFSETS_TIMEOUT_S = 5.0


def _offsets(bootstrap: str, meta: Any, tps: set[tuple[str, int]], which: int = LATEST
             ) -> dict[tuple[str, int], int]:
    """Each partition's log end offset (LATEST), log start offset (EARLIEST) or first
    offset at or after a time (ms; -1 when none is), as its leader answers ListOffsets;
    a partition with no leader, one that is gone or whose leader cannot say is left
    out (after asking again for OFFSETS_TIMEOUT_S where the answer may change)."""
    return list_offsets(meta, tps, which, bootstrap=bootstrap, timeout_s=OFFSETS_TIMEOUT_S)[0]


def _committed(conn: Connection, group: str) -> dict[tuple[str, int], int]:
    resp = _ask(conn, lambda: OffsetFetchRequest(group_id=group, topics=None),
                OffsetFetchResponse, 2, 7, lambda r: (r.error_code,))
    if resp.error_code:
        raise Refused(resp.error_code, f"OffsetFetch of group {group}")
    return {(t.name, p.partition_index): p.committed_offset for t in resp.topics
            for p in t.partitions if not p.error_code and p.committed_offset >= 0}


def _group(conn: Connection, group: str) -> Any:
    resp = _ask(conn, lambda: DescribeGroupsRequest(groups=[group]), DescribeGroupsResponse,
                0, 5, lambda r: [g.error_code for g in r.groups])
    [g] = resp.groups
    if g.error_code:
        raise Refused(g.error_code, f"DescribeGroups of group {group}")
    return g


def describe(bootstrap: str, group: str) -> dict[str, Any]:
    with coordinator(bootstrap, group) as conn:
        g = _group(conn, group)
        committed = _committed(conn, group)
        host, _, port = conn.address.rpartition(":")
        where = {"id": conn.node_id, "host": host, "port": int(port)}
    if g.group_state == "Dead" and not committed:
        raise Refused(errors.GROUP_ID_NOT_FOUND, f"group {group} does not exist")
    if g.protocol_type not in CONSUMER_PROTOCOL_TYPES:
        raise NotConsumerGroup(group, g.protocol_type)
    holder: dict[tuple[str, int], Any] = {}
    members = []
    for m in g.members:
        assigned: list[tuple[str, int]] = []
        if g.protocol_type == "consumer" and m.member_assignment:
            try:
                a = ConsumerProtocolAssignment.decode(m.member_assignment)
                assigned = [(tp.topic, p) for tp in a.assigned_partitions or []
                            for p in tp.partitions]
            except Exception:  # noqa: BLE001 - a client's bytes: shown as unknown
                assigned = []
        for tp in assigned:
            holder[tp] = m
        members.append({"member_id": m.member_id, "client_id": m.client_id,
                        "host": m.client_host,
                        "group_instance_id": getattr(m, "group_instance_id", None),
                        "partitions": [f"{t}-{p}" for t, p in sorted(assigned)]})
    tps = set(committed) | set(holder)
    ends = {}
    if tps:
        with connect_any(bootstrap) as conn:
            ends = _offsets(bootstrap, metadata(conn, sorted({t for t, _ in tps})), tps)
    rows = []
    for tp in sorted(tps):
        current, end, m = committed.get(tp), ends.get(tp), holder.get(tp)
        rows.append({"topic": tp[0], "partition": tp[1], "current_offset": current,
                     "log_end_offset": end,
                     "lag": end - current if current is not None and end is not None else None,
                     "consumer_id": m.member_id if m else None,
                     "host": m.client_host if m else None,
                     "client_id": m.client_id if m else None})
    return {"group": group, "state": g.group_state, "protocol_type": g.protocol_type,
            "assignor": g.protocol_data, "coordinator": where, "members": members,
            "partitions": rows}


def _table(group: str, rows: list[dict[str, Any]], columns: dict[str, str]) -> list[str]:
    """kafka-consumer-groups.sh's table: GROUP, TOPIC, PARTITION, then `columns` (heading
    -> row key); a missing value is '-'."""
    head = ["GROUP", "TOPIC", "PARTITION", *columns]
    table = [head] + [[group, r["topic"], str(r["partition"])] + [
        "-" if r[k] is None else str(r[k]) for k in columns.values()] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in table]


def render(desc: dict[str, Any]) -> str:
    """kafka-consumer-groups.sh --describe (--offsets): each partition's offsets and lag."""
    lines = []
    if not desc["members"]:
        lines.append(f"Consumer group '{desc['group']}' has no active members.\n")
    lines += _table(desc["group"], desc["partitions"], {
        "CURRENT-OFFSET": "current_offset", "LOG-END-OFFSET": "log_end_offset", "LAG": "lag",
        "CONSUMER-ID": "consumer_id", "HOST": "host", "CLIENT-ID": "client_id"})
    return "\n".join(lines)


def _columns(rows: list[list[str]], widths: list[int]) -> list[str]:
    """Kafka's printf columns: each padded to its width (at least `widths`, at least its
    longest value), the last unpadded, one space apart."""
    n = len(rows[0])
    width = [max([widths[i]] + [len(r[i]) for r in rows]) for i in range(n - 1)]
    return [" ".join([c.ljust(w) for c, w in zip(r, width, strict=False)] + [r[-1]]).rstrip()
            for r in rows]


def _assignment(partitions: list[str]) -> str:
    """kafka-consumer-groups.sh --members --verbose's ASSIGNMENT: `t(0,1), u(2)`, or -."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        topic, _, p = tp.rpartition("-")
        by_topic.setdefault(topic, []).append(int(p))
    return ", ".join(f"{t}({','.join(map(str, sorted(ps)))})"
                     for t, ps in sorted(by_topic.items())) or "-"


def render_members(desc: dict[str, Any], verbose: bool = False) -> str:
    """kafka-consumer-groups.sh --describe --members [--verbose]: one line per member."""
    if not desc["members"]:
        return f"Consumer group '{desc['group']}' has no active members."
    instances = any(m["group_instance_id"] for m in desc["members"])
    head = ["GROUP", "CONSUMER-ID"] + ["GROUP-INSTANCE-ID"] * instances + [
        "HOST", "CLIENT-ID", "#PARTITIONS"] + ["ASSIGNMENT"] * verbose
    rows = [[desc["group"], m["member_id"]] + [m["group_instance_id"] or "-"] * instances + [
        m["host"], m["client_id"], str(len(m["partitions"]))] + [
        _assignment(m["partitions"])] * verbose for m in desc["members"]]
    widths = [15, 15] + [17] * instances + [15, 15, 15, 0]
    return "\n".join(_columns([head] + rows, widths))


def render_state(desc: dict[str, Any]) -> str:
    """kafka-consumer-groups.sh --describe --state: the group's coordinator, assignor,
    state and member count."""
    where = desc["coordinator"]
    head = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    row = [desc["group"], f"{where['host']}:{where['port']}  ({where['id']})",
           desc["assignor"] or "-", desc["state"], str(len(desc["members"]))]
    return "\n".join(_columns([head, row], [15, 25, 20, 20, 0]))


# What kafka-consumer-groups.sh --list --state takes (Kafka's GroupState names).
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
                "Assigning", "Reconciling")
_REBALANCING = frozenset(("PreparingRebalance", "CompletingRebalance", "Assigning",
                          "Reconciling"))


def parse_states(text: str) -> set[str]:
    """`--state S1,S2` of `list` (case-insensitive): Kafka's state names; ValueError."""
    by_lower = {s.lower(): s for s in GROUP_STATES}
    wanted = [w.strip().lower() for w in text.split(",") if w.strip()]
    if not wanted or any(w not in by_lower for w in wanted):
        raise ValueError(f"Invalid state list '{text}'. Valid states are: "
                         f"{', '.join(GROUP_STATES)}")
    return {by_lower[w] for w in wanted}


def render_list_states(groups: list[dict[str, Any]]) -> str:
    """kafka-consumer-groups.sh --list --state: each group with its state."""
    width = max([15] + [len(g["group"]) for g in groups]) + 10
    return "\n".join(f"{a:<{width}} {b}".rstrip() for a, b in [("GROUP", "STATE")] + [
        (g["group"], g["state"] or "Unknown") for g in groups])


def parse_topic_partitions(text: str) -> tuple[str, list[int] | None]:
    """kafka-consumer-groups.sh's `--topic T` (every partition) or `T:0,2`."""
    topic, colon, parts = text.partition(":")
    if not topic:
        raise ValueError(f"--topic {text!r}: no topic name")
    if not colon:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",")})
    except ValueError:
        raise ValueError(f"--topic {text!r}: partitions are numbers separated by ','") from None


def parse_scope(texts: list[str]) -> dict[str, list[int] | None]:
    """Several `--topic`s (`T` or `T:0,2`), merged per topic: its partitions, None for
    all of them."""
    scope: dict[str, list[int] | None] = {}
    for text in texts:
        topic, partitions = parse_topic_partitions(text)
        if topic in scope and partitions is not None and scope[topic] is not None:
            scope[topic] = sorted(set(scope[topic] or []) | set(partitions))
        else:
            scope[topic] = None if topic in scope or partitions is None else partitions
    return scope


def parse_datetime_ms(text: str) -> int:
    """kafka-consumer-groups.sh's --to-datetime, `2026-01-31T12:00:00.000` (local time)
    or with `Z`/`+hh:mm`: milliseconds since the epoch."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm]") from None
    return int(when.timestamp() * 1000)  # a naive time is local, as Kafka's tool reads it


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def parse_duration_ms(text: str) -> int:
    """kafka-consumer-groups.sh's --by-duration, ISO 8601 `PnDTnHnMnS` (`PT1H30M`,
    `P1D`): milliseconds."""
    m = _DURATION.fullmatch(text)
    if m is None or text in ("P", "PT") or text.endswith("T"):
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 duration like PT1H30M")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def read_offsets_file(path: str, group: str) -> dict[tuple[str, int], int]:
    """kafka-consumer-groups.sh's --from-file: the CSV its --export writes, one
    `topic,partition,offset` per line (or `group,topic,partition,offset`, of which this
    group's lines count). ValueError naming the line for anything else."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ValueError(f"--from-file {path}: {err.strerror or err}") from err
    out: dict[tuple[str, int], int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        fields = [f.strip() for f in line.split(",")]
        if fields == [""]:
            continue
        if len(fields) == 4:
            if fields[0] != group:
                continue
            fields = fields[1:]
        try:
            topic, partition, offset = fields[0], int(fields[1]), int(fields[2])
            if not topic or len(fields) != 3 or partition < 0 or offset < 0:
                raise ValueError
        except (ValueError, IndexError):
            raise ValueError(f"--from-file {path}:{n}: {line!r} is not topic,partition,offset "
                             "(or group,topic,partition,offset)") from None
        out[(topic, partition)] = offset
    if not out:
        raise ValueError(f"--from-file {path}: no offsets for group {group}")
    return out


Scope = dict[str, list[int] | None]  # topic: its partitions, None for all of them


def scope_of(tps: Iterable[tuple[str, int]]) -> Scope:
    """These partitions as a Scope, each topic's in order."""
    scope: dict[str, list[int] | None] = {}
    for t, p in sorted(tps):
        scope.setdefault(t, []).append(p)  # type: ignore[union-attr]
    return scope


def plan_reset(conn: Connection, bootstrap: str, group: str, scope: Scope | None, how: str,
               value: int = 0, offsets: dict[tuple[str, int], int] | None = None
               ) -> list[dict[str, Any]]:
    """The offsets a reset would commit: [{"topic", "partition", "offset"}], for the
    partitions of `scope` (None: every partition the group has an offset for, Kafka's
    --all-topics). `how` ("earliest", "latest", "current", "offset", "shift", "time",
    "file") with `value`: the log start, the log end, the committed offset, offset
    `value`, the committed offset plus `value`, or the first record at or after time
    `value` (ms; ListOffsets by timestamp); "file" takes each partition's from
    `offsets`. A partition with no committed offset counts its log end as one; where a
    time has no record, the log end. Each is kept within the partition's log start and
    end, as Kafka's tool does. Refused while the group has members (they would commit
    over it). `conn`: its coordinator."""
    g = _group(conn, group)
    if g.members:
        raise Refused(errors.NON_EMPTY_GROUP, f"group {group} has {len(g.members)} active "
                      "member(s); offsets can be reset only while its consumers are stopped")
    committed = _committed(conn, group)
    if scope is None:
        if not committed:
            raise ValueError(f"--all-topics: group {group} has no committed offsets; name "
                             "the topics with --topic")
        scope = scope_of(committed)
    with connect_any(bootstrap) as c:
        meta = metadata(c, sorted(scope))
    tps: set[tuple[str, int]] = set()
    for t in meta.topics:
        if t.error_code:
            raise Refused(t.error_code, f"topic {t.name}")
        known = sorted(p.partition_index for p in t.partitions)
        wanted = scope.get(t.name)
        wanted = known if wanted is None else wanted
        missing = sorted(set(wanted) - set(known))
        if missing:
            raise ValueError(f"--topic {t.name}: no partition {missing} (it has {len(known)})")
        tps |= {(t.name, p) for p in wanted}
    starts, ends = _offsets(bootstrap, meta, tps, EARLIEST), _offsets(bootstrap, meta, tps, LATEST)
    at_time = _offsets(bootstrap, meta, tps, value) if how == "time" else {}
    plan = []
    for tp in sorted(tps):
        if tp not in starts or tp not in ends:
            raise ClientError(f"{tp[0]}-{tp[1]} has no leader now; try again")
        current = committed.get(tp, ends[tp])
        if how == "earliest":
            offset = starts[tp]
        elif how == "latest":
            offset = ends[tp]
        elif how == "current":
            offset = current
        elif how == "offset":
            offset = value
        elif how == "shift":
            offset = current + value
        elif how == "file":
            offset = (offsets or {})[tp]
        else:
            offset = at_time.get(tp, -1)
            offset = ends[tp] if offset < 0 else offset
        plan.append({"topic": tp[0], "partition": tp[1],
                     "offset": min(max(offset, starts[tp]), ends[tp])})
    return plan


def commit(conn: Connection, group: str, plan: list[dict[str, Any]]) -> None:
    """Commit `plan`'s offsets as an admin does (no generation, no member); `conn`: the
    group's coordinator."""
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    topics: dict[str, list[Any]] = {}
    for r in plan:
        topics.setdefault(r["topic"], []).append(T.OffsetCommitRequestPartition(
            partition_index=r["partition"], committed_offset=r["offset"],
            committed_leader_epoch=-1, committed_metadata=""))
    resp = _ask(conn, lambda: OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, retention_time_ms=-1,
        topics=[T(name=t, partitions=ps) for t, ps in topics.items()]),
        OffsetCommitResponse, 2, 7,
        lambda r: [p.error_code for t in r.topics for p in t.partitions])
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:
                raise Refused(p.error_code, f"OffsetCommit of {t.name}-{p.partition_index}")


def delete_offsets(bootstrap: str, group: str, scope: Scope
                   ) -> tuple[int, dict[tuple[str, int], int]]:
    """OffsetDelete (KIP-496) at the group's coordinator for the partitions of `scope`
    (a topic alone: all its partitions): the group-level error code and one per
    partition. A topic that does not exist is answered here, as Kafka's tool does: its
    partition -1, UNKNOWN_TOPIC_OR_PARTITION; the coordinator is not asked about it."""
    with connect_any(bootstrap) as c:
        meta = metadata(c, sorted(scope))
    per: dict[tuple[str, int], int] = {}
    tps = []
    for t in meta.topics:
        if t.error_code:
            per[(t.name, -1)] = t.error_code
            continue
        wanted = scope.get(t.name)
        tps += [(t.name, p) for p in (sorted(p.partition_index for p in t.partitions)
                                      if wanted is None else wanted)]
    if not tps:
        return errors.NONE, per
    T = OffsetDeleteRequest.OffsetDeleteRequestTopic
    by_topic: dict[str, list[Any]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(T.OffsetDeleteRequestPartition(partition_index=p))
    with coordinator(bootstrap, group) as conn:
        resp = _ask(conn, lambda: OffsetDeleteRequest(group_id=group, topics=[
            T(name=t, partitions=ps) for t, ps in by_topic.items()]), OffsetDeleteResponse,
            0, 0, lambda r: (r.error_code,))
    per.update({(t.name, p.partition_index): p.error_code
                for t in resp.topics for p in t.partitions})
    return resp.error_code, per


def render_offset_deletion(group: str, scope: Scope, code: int,
                           per: dict[tuple[str, int], int]) -> tuple[list[str], list[str]]:
    """kafka-consumer-groups.sh --delete-offsets' output: (stdout lines, stderr lines)."""
    err = []
    # Kafka's tool takes a partition error the coordinator answered for the request's (its
    # admin client's all() fails with it); a topic the tool found unknown itself (partition
    # -1) is only a row of the table.
    refused = code == errors.NONE and any(c for (_, p), c in per.items() if p >= 0)
    if code == errors.NONE and not refused:
        out = [f"Request succeed for deleting offsets with topic {', '.join(scope)} group {group}"]
    else:
        out = []
    if code != errors.NONE:
        err.append({
            errors.GROUP_ID_NOT_FOUND: f"Error: '{group}' does not exist.",
            errors.NON_EMPTY_GROUP: f"Error: Deleting offsets of a consumer group '{group}' is "
                                    "forbidden if the group is not empty.",
        }.get(code, f"Error: Encounter some unknown error: {ke.for_code(code).__name__}"))
    if refused:
        err.append("Error: Encounter some partition level error, see the follow-up details:")
    rows = [("TOPIC", "PARTITION", "STATUS")] + [
        (t, str(p) if p >= 0 else "-",
         f"Error: {ke.for_code(c).description}" if c else "Successful")
        for (t, p), c in sorted(per.items())]
    out += [""] + [f"{a:<30} {b:<15} {c}".rstrip() for a, b, c in rows]
    return out, err


def delete(bootstrap: str, group: str) -> None:
    with coordinator(bootstrap, group) as conn:
        resp = _ask(conn, lambda: DeleteGroupsRequest(groups_names=[group]),
                    DeleteGroupsResponse, 0, 2, lambda r: [g.error_code for g in r.results])
    [r] = resp.results
    if r.error_code == errors.GROUP_ID_NOT_FOUND:
        raise Refused(r.error_code, f"group {group} does not exist")
    if r.error_code:
        raise Refused(r.error_code, f"group {group} has active members" if
                      r.error_code == errors.NON_EMPTY_GROUP else f"group {group}")


# ---- the command ----


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logkeeper groups", description=(
        "List, describe (offsets and lag), reset the offsets of and delete consumer "
        "groups, as Kafka's kafka-consumer-groups.sh."))
    sub = p.add_subparsers(dest="action", required=True)

    s = add_command(sub, "list", "every group's name")
    s.add_argument("--json", action="store_true", help="with state and protocol type")
    s.add_argument("--state", nargs="?", const="", metavar="S1,S2",
                   help="print each group's state; with states named, only groups in them")
    s = add_command(sub, "describe", "committed offsets, log end offsets, lag and members")
    which = s.add_mutually_exclusive_group(required=True)
    which.add_argument("--group", action="append", help="a group (again for more)")
    which.add_argument("--all-groups", action="store_true", help="every consumer group")
    mode = s.add_mutually_exclusive_group()
    mode.add_argument("--offsets", action="store_true",
                      help="each partition's offsets, lag and member (the default)")
    mode.add_argument("--members", action="store_true",
                      help="each member: host, client id, how many partitions")
    mode.add_argument("--state", action="store_true",
                      help="the group's coordinator, assignor, state and member count")
    s.add_argument("--verbose", action="store_true",
                   help="with --members: each member's partitions too")
    s.add_argument("--json", action="store_true", help="print JSON")
    s = add_command(sub, "reset-offsets",
                    "commit new offsets for a group whose consumers are stopped")
    s.add_argument("--group", required=True)
    scope = s.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", metavar="T[:P,P]",
                       help="a topic, all its partitions or those listed (again for more)")
    scope.add_argument("--all-topics", action="store_true",
                       help="every partition the group has committed an offset for")
    to = s.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-current", action="store_true",
                    help="the committed offset (the log end where none is)")
    to.add_argument("--from-file", metavar="CSV",
                    help="the offsets of a file --export wrote (topic,partition,offset lines)")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--to-datetime", type=parse_datetime_ms, metavar="YYYY-MM-DDTHH:mm:SS.sss",
                    help="the first record at or after this time (local time unless it "
                    "ends in Z or +hh:mm)")
    to.add_argument("--by-duration", type=parse_duration_ms, metavar="PnDTnHnMnS",
                    help="the first record at or after this long ago (ISO 8601, e.g. PT1H)")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="from the committed offset (the log end when none), +/-N")
    run = s.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true",
                     help="commit them (without it, only print the plan)")
    run.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    s.add_argument("--export", action="store_true",
                   help="print the plan as topic,partition,offset lines, for --from-file")
    s = add_command(sub, "delete", "delete an empty group and its committed offsets")
    s.add_argument("--group", required=True)
    s = add_command(sub, "delete-offsets", "delete a group's committed offsets of some "
                    "topics (none of them subscribed to by its members)")
    s.add_argument("--group", required=True)
    s.add_argument("--topic", action="append", required=True, metavar="T[:P,P]",
                   help="a topic, all its partitions or those listed (again for more)")
    return p


def _reset_target(args: argparse.Namespace) -> tuple[str, int]:
    """reset-offsets' one target option as plan_reset's (how, value)."""
    if args.to_earliest:
        return "earliest", 0
    if args.to_latest:
        return "latest", 0
    if args.to_current:
        return "current", 0
    if args.from_file is not None:
        return "file", 0
    if args.to_offset is not None:
        return "offset", args.to_offset
    if args.shift_by is not None:
        return "shift", args.shift_by
    if args.to_datetime is not None:
        return "time", args.to_datetime
    return "time", int(time.time() * 1000) - args.by_duration


def _describe(args: argparse.Namespace, bootstrap: str) -> int:
    """Each group named (or every consumer group) as --offsets, --members or --state
    shows it, one block each, a blank line between; a group that cannot be described is
    named on stderr and the others still are (exit 1)."""
    names = args.group
    failed = []
    if args.all_groups:
        listed, failed = list_groups(bootstrap)
        names = [g["group"] for g in listed]
    blocks, described = [], []
    for name in dict.fromkeys(names):
        try:
            desc = describe(bootstrap, name)
        except (Refused, NotConsumerGroup) as err:
            failed.append(str(err))
            continue
        described.append(desc)
        if desc["state"] in _REBALANCING:
            print(f"Warning: Consumer group '{name}' is rebalancing.", file=sys.stderr)
        blocks.append(render_state(desc) if args.state else
                      render_members(desc, args.verbose) if args.members else render(desc))
    one = len(names) == 1 and not args.all_groups  # one object, as before several
    if args.json and (described or not one):
        print(json.dumps(described[0] if one else described, indent=2))
    elif blocks:
        print("\n\n".join(blocks))
    for why in failed:
        print(f"logkeeper groups: {why}", file=sys.stderr)
    return 1 if failed else 0


def _run(args: argparse.Namespace, bootstrap: str) -> int:
    if args.action == "list":
        states = parse_states(args.state) if args.state else None
        groups, failed = list_groups(bootstrap)
        if states is not None:
            groups = [g for g in groups if g["state"] in states]
        if args.json:
            print(json.dumps(groups, indent=2))
        elif args.state is not None:
            print(render_list_states(groups))
        else:
            print("\n".join(g["group"] for g in groups))
        for why in failed:
            print(f"logkeeper groups: the groups of {why} are not listed", file=sys.stderr)
        return 1 if failed else 0
    elif args.action == "describe":
        return _describe(args, bootstrap)
    elif args.action == "reset-offsets":
        how, value = _reset_target(args)
        offsets = read_offsets_file(args.from_file, args.group) if how == "file" else None
        scope: Scope | None = None
        if offsets is not None:
            # The file names the partitions (Kafka's --from-file); --topic narrows them.
            named = {parse_topic_partitions(text)[0] for text in args.topic or []}
            scope = scope_of(tp for tp in offsets if not named or tp[0] in named)
            if not scope:
                raise ValueError(f"--from-file {args.from_file}: no offsets for the topics "
                                 f"of --topic ({', '.join(sorted(named))})")
        elif args.topic:
            scope = parse_scope(args.topic)
        elif not args.all_topics:
            raise ValueError("reset-offsets needs its partitions: --topic T[:P,P] (again for "
                             "more), --all-topics or --from-file")
        with coordinator(bootstrap, args.group) as conn:
            plan = plan_reset(conn, bootstrap, args.group, scope, how, value, offsets)
            if args.execute:
                commit(conn, args.group, plan)
        if args.export:
            print("\n".join(f"{r['topic']},{r['partition']},{r['offset']}" for r in plan))
        else:
            print("\n".join(_table(args.group, plan, {"NEW-OFFSET": "offset"})))
        if not args.execute:
            print("(a plan only: add --execute to commit it)", file=sys.stderr)
    elif args.action == "delete-offsets":
        scope = parse_scope(args.topic)
        code, per = delete_offsets(bootstrap, args.group, scope)
        out, err = render_offset_deletion(args.group, scope, code, per)
        print("\n".join(out))
        for line in err:
            print(line, file=sys.stderr)
        return 1 if code or any(per.values()) else 0
    else:
        delete(bootstrap, args.group)
        # kafka-consumer-groups.sh --delete's line, word for word.
        print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
    return 0


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return _run(args, bootstrap_of(args))
    except Refused as err:
        changes = args.action in ("reset-offsets", "delete")
        print(f"logkeeper groups: {err}{'; nothing changed' if changes else ''}",
              file=sys.stderr)
        return 1
    except (ClientError, ValueError) as err:  # ConfigError is a ValueError
        print(f"logkeeper groups: {err}", file=sys.stderr)
        return 2
