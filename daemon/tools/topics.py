"""`logkeeper topics describe`: leader, replicas, ISR and offline replicas per partition.

Asks a broker for Metadata (v5+, which carries offline replicas) and prints what
Kafka's `kafka-topics.sh --describe` prints, one line per topic and one per partition;
`--json` prints the same as JSON instead.

The broker asked is `--bootstrap-server`, else the listener of the daemon on this host:
that of `--config FILE`, or of the embedded defaults (127.0.0.1:9092).

Exit codes: 0 when every topic was described, 1 when a named topic does not exist or
carries an error, 2 on a usage error, a bad config, or when no bootstrap server can be
reached.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from ..api.errors import name_of
from .client import ClientError, connect_any


def describe(bootstrap: str, topics: list[str] | None = None) -> dict[str, Any]:
    with connect_any(bootstrap) as conn:
        req_topics = None if not topics else [
            MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        meta = conn.call(MetadataRequest(topics=req_topics, allow_auto_topic_creation=False),
                         MetadataResponse, lo=1, hi=8)
    out: dict[str, Any] = {"cluster_id": meta.cluster_id, "controller": meta.controller_id,
                           "brokers": [{"id": b.node_id, "host": b.host, "port": b.port}
                                       for b in meta.brokers], "topics": []}
    for t in sorted(meta.topics, key=lambda t: t.name):
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        out["topics"].append({
            "topic": t.name, "error_code": t.error_code, "partition_count": len(parts),
            "replication_factor": max((len(p.replica_nodes) for p in parts), default=0),
            "partitions": [{
                "partition": p.partition_index, "leader": p.leader_id,
                "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes),
                "offline": list(p.offline_replicas or []), "error_code": p.error_code,
            } for p in parts]})
    return out


def render(desc: dict[str, Any]) -> str:
    lines = []
    for t in desc["topics"]:
        if t["error_code"]:
            lines.append(f"Topic: {t['topic']}\tError: {t['error_code']}")
            continue
        lines.append(f"Topic: {t['topic']}\tPartitionCount: {t['partition_count']}\t"
                     f"ReplicationFactor: {t['replication_factor']}\tConfigs: ")
        for p in t["partitions"]:
            def ids(xs: list[int]) -> str:
                return ",".join(str(x) for x in xs)
            lines.append(f"\tTopic: {t['topic']}\tPartition: {p['partition']}\t"
                         f"Leader: {p['leader'] if p['leader'] >= 0 else 'none'}\t"
                         f"Replicas: {ids(p['replicas'])}\tIsr: {ids(p['isr'])}\t"
                         f"Offline: {ids(p['offline'])}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logkeeper topics", description="Describe topics.")
    sub = p.add_subparsers(dest="action", required=True)
    d = sub.add_parser("describe", help="leader, replicas, ISR, offline replicas per partition")
    where = d.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]",
                       help="default: the listener of --config, or of the embedded defaults")
    where.add_argument("--config", metavar="FILE",
                       help="the daemon's config, to find its listener")
    d.add_argument("--topic", action="append", default=[], help="a topic (repeatable; "
                   "default: all)")
    d.add_argument("--json", action="store_true", help="print JSON")
    return p


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    bootstrap = args.bootstrap_server
    try:
        if bootstrap is None:
            from .. import config as config_mod

            cfg = config_mod.load(args.config)
            bootstrap = config_mod.local_address(cfg.listener.host, cfg.listener.port)
        desc = describe(bootstrap, args.topic or None)
    except (ClientError, ValueError) as err:  # ConfigError is a ValueError
        print(f"logkeeper topics: {err}", file=sys.stderr)
        return 2
    print(json.dumps(desc, indent=2) if args.json else render(desc))
    failed = [t for t in desc["topics"] if t["error_code"]]
    for t in failed:
        name = name_of(t["error_code"])
        print(f"logkeeper topics: topic {t['topic']!r}: error {t['error_code']} ({name}) "
              f"from {bootstrap}", file=sys.stderr)
    return 1 if failed else 0
