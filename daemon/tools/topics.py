"""`logkeeper topics`: what Kafka's `kafka-topics.sh` does, through the Kafka protocol.

    logkeeper topics list [--exclude-internal]
    logkeeper topics describe [--topic T|REGEX ...] [--exclude-internal] [--json]
        [--under-replicated-partitions | --unavailable-partitions |
         --under-min-isr-partitions | --at-min-isr-partitions | --topics-with-overrides]
    logkeeper topics create --topic T [--partitions N] [--replication-factor R]
                            [--replica-assignment 1:2,2:3] [--topic-config K=V ...]
                            [--if-not-exists]
    logkeeper topics alter --topic T --partitions N
    logkeeper topics delete --topic T [--topic T2 ...] [--if-exists]

`describe` prints what `kafka-topics.sh --describe` prints, one line per topic (with the
topic's own configs, from DescribeConfigs) and one per partition (leader, replicas, ISR,
offline replicas, from Metadata v5+; a partition being reassigned also its adding and
removing replicas, from the controller); `--json` prints the same as JSON. A partition
filter shows only the partitions in that state (and no topic lines), as Kafka's does:
what an operator asks while a broker or a disk is down. `create`,
`alter` (more partitions: CreatePartitions) and `delete` go to the cluster's active
controller, found through Metadata, as Kafka's admin clients send them; a standalone
daemon is its own controller. Without `--partitions` or `--replication-factor` the
broker's `num.partitions` and `default.replication.factor` apply. kafka-topics.sh's
`--config K=V` is `--topic-config K=V` here: `--config FILE` names the daemon's config,
as in every `logkeeper` command.

The broker asked is `--bootstrap-server`, else the listener of the daemon on this host:
that of `--config FILE`, or of the embedded defaults (127.0.0.1:9092).

Exit codes: 0 done (and for describe: every topic described); 1 the broker refused, with
the error code, its name and the broker's message (nothing changed), or for describe a
named topic does not exist or carries an error; 2 a usage error, a bad config file, or
no broker reachable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)

from ..api import errors
from ..api.errors import name_of
from ..cluster import znodes
from .client import (
    ClientError,
    Connection,
    Refused,
    add_command,
    at_controller,
    bootstrap_of,
    connect_any,
    metadata,
)

# What a topic name is made of (Kafka's Topic.validate): any other character makes a
# --topic of describe a regular expression.
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_TIMEOUT_MS = 30000


# ---- describe and list ----


def _topic_configs(conn: Connection, names: list[str]
                   ) -> dict[str, tuple[dict[str, str], int | None]]:
    """Each topic's own configs (set at creation or altered since), as
    `kafka-topics.sh --describe` lists them, and the min.insync.replicas that applies to
    it, wherever it is set; {} for a broker too old to say."""
    if not names or DescribeConfigsRequest.API_KEY not in conn.versions:
        return {}
    R = DescribeConfigsRequest.DescribeConfigsResource
    resp = conn.call(DescribeConfigsRequest(
        resources=[R(resource_type=TOPIC_RESOURCE, resource_name=n, configuration_keys=None)
                   for n in names],
        include_synonyms=False, include_documentation=False), DescribeConfigsResponse,
        lo=1, hi=4)
    out = {}
    for r in resp.results:
        if r.error_code:
            continue
        own = {c.name: c.value for c in sorted(r.configs, key=lambda c: c.name)
               if c.config_source == DYNAMIC_TOPIC_CONFIG and c.value is not None}
        min_isr = next((int(c.value) for c in r.configs
                        if c.name == "min.insync.replicas" and c.value), None)
        out[r.resource_name] = (own, min_isr)
    return out


def _reassignments(bootstrap: str) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    """The reassignments in progress, as kafka-topics.sh shows them; none when the
    controller cannot say within a few seconds (no controller right now, one that hangs,
    or one that does not serve it): describe is what an operator runs when things are
    wrong."""
    from .reassign import ongoing

    try:
        return ongoing(bootstrap, timeout_ms=3000, socket_timeout=5.0)
    except (ClientError, Refused):
        return {}


def describe(bootstrap: str, topics: list[str] | None = None) -> dict[str, Any]:
    with connect_any(bootstrap) as conn:
        meta = metadata(conn, topics)
        configs = _topic_configs(conn, [t.name for t in meta.topics if not t.error_code])
    moving = _reassignments(bootstrap)
    out: dict[str, Any] = {"cluster_id": meta.cluster_id, "controller": meta.controller_id,
                           "brokers": [{"id": b.node_id, "host": b.host, "port": b.port}
                                       for b in meta.brokers], "topics": []}
    for t in sorted(meta.topics, key=lambda t: t.name):
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        own, min_isr = configs.get(t.name, ({}, None))
        shown = [{
            "partition": p.partition_index, "leader": p.leader_id,
            "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes),
            "offline": list(p.offline_replicas or []), "error_code": p.error_code,
            "adding": moving.get((t.name, p.partition_index), ([], [], []))[1],
            "removing": moving.get((t.name, p.partition_index), ([], [], []))[2],
        } for p in parts]
        topic_id = getattr(t, "topic_id", None)  # Metadata v10+ (KIP-516)
        out["topics"].append({
            "topic": t.name, "error_code": t.error_code, "internal": bool(t.is_internal),
            "topic_id": znodes.topic_id_to_str(topic_id)
            if topic_id is not None and topic_id.int else None,
            "partition_count": len(parts),
            # As Kafka's TopicCommand: the first partition's (a partition being
            # reassigned counts its original replicas).
            "replication_factor": (len(shown[0]["replicas"]) - len(shown[0]["adding"])
                                   if shown else 0),
            "configs": own, "min_insync_replicas": min_isr, "partitions": shown})
    return out


# kafka-topics.sh --describe's partition filters: (topic, live broker ids, partition)
# -> whether the partition is shown.
FILTERS: dict[str, Any] = {
    "under_replicated_partitions": lambda t, live, p: len(p["isr"]) < len(p["replicas"]) - len(p["adding"]),
    "unavailable_partitions": lambda t, live, p: p["leader"] not in live,
    "under_min_isr_partitions": lambda t, live, p: t["min_insync_replicas"] is not None
    and len(p["isr"]) < t["min_insync_replicas"],
    "at_min_isr_partitions": lambda t, live, p: t["min_insync_replicas"] is not None
    and len(p["isr"]) == t["min_insync_replicas"],
}


def only(desc: dict[str, Any], which: str) -> dict[str, Any]:
    """`desc` with only the partitions FILTERS[which] shows, and only their topics."""
    keep = FILTERS[which]
    live = {b["id"] for b in desc["brokers"]}
    topics = []
    for t in desc["topics"]:
        parts = [p for p in t["partitions"] if not t["error_code"] and keep(t, live, p)]
        if parts:
            topics.append({**t, "partitions": parts})
    return {**desc, "topics": topics}


def render(desc: dict[str, Any], *, headers: bool = True) -> str:
    """kafka-topics.sh --describe's lines; `headers=False` leaves out each topic's
    summary line, as it does for a partition filter."""
    lines = []
    for t in desc["topics"]:
        if t["error_code"]:
            lines.append(f"Topic: {t['topic']}\tError: {t['error_code']} "
                         f"({name_of(t['error_code'])})")
            continue
        configs = ",".join(f"{k}={v}" for k, v in t["configs"].items())
        if headers:  # the topic id as kafka-topics.sh shows it: when there is one
            topic_id = f"\tTopicId: {t['topic_id']}" if t.get("topic_id") else ""
            lines.append(f"Topic: {t['topic']}{topic_id}\tPartitionCount: "
                         f"{t['partition_count']}\tReplicationFactor: "
                         f"{t['replication_factor']}\tConfigs: {configs}")
        for p in t["partitions"]:
            def ids(xs: list[int]) -> str:
                return ",".join(str(x) for x in xs)
            lines.append(f"\tTopic: {t['topic']}\tPartition: {p['partition']}\t"
                         f"Leader: {p['leader'] if p['leader'] >= 0 else 'none'}\t"
                         f"Replicas: {ids(p['replicas'])}\tIsr: {ids(p['isr'])}\t"
                         f"Offline: {ids(p['offline'])}"
                         + (f"\tAdding Replicas: {ids(p['adding'])}\tRemoving Replicas: "
                            f"{ids(p['removing'])}" if p["adding"] or p["removing"] else ""))
    return "\n".join(lines)


def list_topics(bootstrap: str, *, exclude_internal: bool = False) -> list[str]:
    with connect_any(bootstrap) as conn:
        meta = metadata(conn, None)
    return sorted(t.name for t in meta.topics
                  if not t.error_code and not (exclude_internal and t.is_internal))


# ---- create, alter, delete: at the controller ----


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """kafka-topics.sh's `--replica-assignment 1:2,2:3`: partition 0 on brokers 1 and 2
    (1 preferred), partition 1 on 2 and 3; ValueError naming what is wrong."""
    out: dict[int, list[int]] = {}
    for i, part in enumerate(text.split(",")):
        try:
            brokers = [int(b) for b in part.split(":")]
        except ValueError:
            raise ValueError(f"--replica-assignment {text!r}: partition {i}'s replicas "
                             f"{part!r} are not broker ids separated by ':'") from None
        if len(set(brokers)) != len(brokers):
            raise ValueError(f"--replica-assignment {text!r}: partition {i} names a broker "
                             "twice")
        out[i] = brokers
    if len({len(b) for b in out.values()}) != 1:
        raise ValueError(f"--replica-assignment {text!r}: every partition needs the same "
                         "number of replicas")
    return out


def parse_topic_configs(items: list[str]) -> dict[str, str]:
    """`--topic-config K=V` (repeatable) -> {K: V}."""
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--topic-config {item!r}: expected K=V, e.g. retention.ms=60000")
        out[key.strip()] = value.strip()
    return out


def create(bootstrap: str, topic: str, *, partitions: int = -1, replication_factor: int = -1,
           assignment: dict[int, list[int]] | None = None, configs: dict[str, str] | None = None,
           timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
    T = CreateTopicsRequest.CreatableTopic

    def send(conn: Connection) -> tuple[int, str | None]:
        resp = conn.call(CreateTopicsRequest(topics=[T(
            name=topic, num_partitions=partitions, replication_factor=replication_factor,
            assignments=[T.CreatableReplicaAssignment(partition_index=p, broker_ids=b)
                         for p, b in sorted((assignment or {}).items())],
            configs=[T.CreatableTopicConfig(name=k, value=v)
                     for k, v in (configs or {}).items()])],
            timeout_ms=timeout_ms, validate_only=False), CreateTopicsResponse, lo=1, hi=5)
        [r] = resp.topics
        return r.error_code, r.error_message

    code, message = at_controller(bootstrap, timeout_ms, send)
    if code:
        raise Refused(code, message)


def add_partitions(bootstrap: str, topic: str, count: int, *,
                   timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
    T = CreatePartitionsRequest.CreatePartitionsTopic

    def send(conn: Connection) -> tuple[int, str | None]:
        resp = conn.call(CreatePartitionsRequest(
            topics=[T(name=topic, count=count, assignments=None)], timeout_ms=timeout_ms,
            validate_only=False), CreatePartitionsResponse, lo=0, hi=3)
        [r] = resp.results
        return r.error_code, r.error_message

    code, message = at_controller(bootstrap, timeout_ms, send)
    if code:
        raise Refused(code, message)


def delete(bootstrap: str, topic: str, *, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
    def send(conn: Connection) -> tuple[int, str | None]:
        resp = conn.call(DeleteTopicsRequest(topic_names=[topic], timeout_ms=timeout_ms),
                         DeleteTopicsResponse, lo=0, hi=5)
        [r] = resp.responses
        return r.error_code, getattr(r, "error_message", None)

    code, message = at_controller(bootstrap, timeout_ms, send)
    if code:
        raise Refused(code, message)


# ---- the command ----


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logkeeper topics", description=(
        "List, describe, create, alter (add partitions) and delete topics, as Kafka's "
        "kafka-topics.sh."))
    sub = p.add_subparsers(dest="action", required=True)

    s = add_command(sub, "list", "topic names, one per line")
    s.add_argument("--exclude-internal", action="store_true",
                   help="leave out internal topics (__consumer_offsets)")
    s = add_command(sub, "describe", "leader, replicas, ISR, offline replicas per partition")
    s.add_argument("--topic", action="append", default=[], help="a topic, or a regular "
                   "expression its whole name matches (repeatable; default: all)")
    s.add_argument("--exclude-internal", action="store_true",
                   help="leave out internal topics (__consumer_offsets)")
    s.add_argument("--json", action="store_true", help="print JSON")
    shown = s.add_mutually_exclusive_group()
    shown.add_argument("--topics-with-overrides", action="store_true",
                       help="only the topics with configs of their own, without partitions")
    for flag, what in (("--under-replicated-partitions", "ISR smaller than the replicas"),
                       ("--unavailable-partitions", "no leader, or a leader not alive"),
                       ("--under-min-isr-partitions", "ISR below min.insync.replicas"),
                       ("--at-min-isr-partitions", "ISR at min.insync.replicas")):
        shown.add_argument(flag, action="store_true", help=f"only partitions with {what}")
    s = add_command(sub, "create", "create a topic (at the controller)")
    s.add_argument("--topic", required=True)
    s.add_argument("--partitions", type=int, default=-1,
                   help="default: the broker's num.partitions")
    s.add_argument("--replication-factor", type=int, default=-1,
                   help="default: the broker's default.replication.factor")
    s.add_argument("--replica-assignment", metavar="B:B,B:B",
                   help="each partition's brokers, preferred leader first; instead of "
                   "--partitions and --replication-factor")
    s.add_argument("--topic-config", action="append", default=[], metavar="K=V",
                   help="a topic config (repeatable), e.g. retention.ms=60000 "
                   "(kafka-topics.sh's --config)")
    s.add_argument("--if-not-exists", action="store_true",
                   help="succeed, changing nothing, when the topic exists")
    s.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS)
    s = add_command(sub, "alter", "add partitions to a topic (at the controller)")
    s.add_argument("--topic", required=True)
    s.add_argument("--partitions", type=int, required=True,
                   help="the new partition count (more than today's)")
    s.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS)
    s = add_command(sub, "delete", "delete topics (at the controller)")
    s.add_argument("--topic", action="append", required=True, help="a topic (repeatable)")
    s.add_argument("--if-exists", action="store_true",
                   help="succeed when a topic does not exist")
    s.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS)
    return p


def _topics_named(bootstrap: str, names: list[str]) -> list[str] | None:
    """kafka-topics.sh's --topic: a name, or a regular expression the whole name matches
    (one with a character a topic name cannot hold); None for every topic."""
    if not names:
        return None
    if not any(set(n) - _NAME_CHARS for n in names):
        return names
    every = list_topics(bootstrap)
    out: list[str] = []
    for n in names:
        if not set(n) - _NAME_CHARS:
            out.append(n)
            continue
        try:
            pattern = re.compile(n)
        except re.error as err:
            raise ValueError(f"--topic {n!r} is not a regular expression: {err}") from None
        out += [t for t in every if pattern.fullmatch(t)]
    return list(dict.fromkeys(out))


def _describe(args: argparse.Namespace, bootstrap: str) -> int:
    topics = _topics_named(bootstrap, args.topic)
    if topics == []:
        print(f"logkeeper topics: no topic matches {', '.join(args.topic)}", file=sys.stderr)
        return 1
    desc = describe(bootstrap, topics)
    if args.exclude_internal:
        desc = {**desc, "topics": [t for t in desc["topics"] if not t["internal"]]}
    if args.topics_with_overrides:  # Kafka's: their summary lines, no partitions
        desc = {**desc, "topics": [{**t, "partitions": []} for t in desc["topics"]
                                   if t["configs"] and not t["error_code"]]}
    which = next((f for f in FILTERS if getattr(args, f)), None)
    if which is not None:
        desc = only(desc, which)
    text = json.dumps(desc, indent=2) if args.json else render(desc, headers=which is None)
    if text:
        print(text)
    failed = [t for t in desc["topics"] if t["error_code"]]
    for t in failed:
        print(f"logkeeper topics: topic {t['topic']!r}: error {t['error_code']} "
              f"({name_of(t['error_code'])}) from {bootstrap}", file=sys.stderr)
    return 1 if failed else 0


def _refused(topic: str, err: Refused) -> int:
    if err.code == errors.REQUEST_TIMED_OUT:
        print(f"logkeeper topics: topic {topic!r}: {err}; the controller goes on with it "
              "(`logkeeper topics describe` shows when it is done)", file=sys.stderr)
    else:
        print(f"logkeeper topics: topic {topic!r}: {err}; nothing changed", file=sys.stderr)
    return 1


def _change(args: argparse.Namespace, bootstrap: str) -> int:
    if args.action == "create":
        assignment = None
        if args.replica_assignment is not None:
            if args.partitions != -1 or args.replication_factor != -1:
                raise ValueError("--replica-assignment gives the partitions and their "
                                 "replicas: leave out --partitions and --replication-factor")
            assignment = parse_replica_assignment(args.replica_assignment)
        configs = parse_topic_configs(args.topic_config)
        try:
            create(bootstrap, args.topic, partitions=args.partitions,
                   replication_factor=args.replication_factor, assignment=assignment,
                   configs=configs, timeout_ms=args.timeout_ms)
        except Refused as err:
            if err.code == errors.TOPIC_ALREADY_EXISTS and args.if_not_exists:
                return 0
            return _refused(args.topic, err)
        print(f"Created topic {args.topic}.")
    elif args.action == "alter":
        try:
            add_partitions(bootstrap, args.topic, args.partitions, timeout_ms=args.timeout_ms)
        except Refused as err:
            return _refused(args.topic, err)
        print(f"Topic {args.topic} now has {args.partitions} partitions.")
    else:
        for topic in args.topic:
            try:
                delete(bootstrap, topic, timeout_ms=args.timeout_ms)
            except Refused as err:
                if err.code == errors.UNKNOWN_TOPIC_OR_PARTITION and args.if_exists:
                    continue
                return _refused(topic, err)
            print(f"Deleted topic {topic}.")
    return 0


def _topic_config_as_config(argv: list[str]) -> str | None:
    """kafka-topics.sh's `--config K=V`, which here would name the daemon's config file."""
    for i, arg in enumerate(argv):
        value = arg[len("--config="):] if arg.startswith("--config=") else (
            argv[i + 1] if arg == "--config" and i + 1 < len(argv) else None)
        if value is not None and "=" in value and not os.path.exists(value):
            return value
    return None


def main(argv: list[str]) -> int:
    misplaced = _topic_config_as_config(argv)
    if misplaced is not None:
        print(f"logkeeper topics: --config {misplaced}: --config names the daemon's config "
              f"file; give a topic config with --topic-config {misplaced}", file=sys.stderr)
        return 2
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        bootstrap = bootstrap_of(args)
        if args.action == "list":
            for name in list_topics(bootstrap, exclude_internal=args.exclude_internal):
                print(name)
            return 0
        if args.action == "describe":
            return _describe(args, bootstrap)
        return _change(args, bootstrap)
    except (ClientError, ValueError) as err:  # ConfigError is a ValueError
        print(f"logkeeper topics: {err}", file=sys.stderr)
        return 2
