"""`logkeeper log-dirs describe`: log dirs per broker, through the DescribeLogDirs API.

Output (stdout) is the JSON that Kafka's `kafka-log-dirs.sh --describe` prints:
`{"version":1,"brokers":[{"broker":N,"logDirs":[{"logDir":...,"error":null|"<name>",
"partitions":[{"partition":"t-0","size":S,"offsetLag":L,"isFuture":false}]}]}]}`, plus
`totalBytes`/`usableBytes` per dir where the broker reports them (DescribeLogDirs v4+).
The broker list comes from Metadata; `--broker-list` narrows it.

Exit codes: 0 when every broker answered, 1 when a broker failed or reported a dir
error, 2 on a usage error or when no bootstrap server can be reached. The `readmit`,
`cordon` and `uncordon` actions belong to the log-dir health work (next issue).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from .client import ClientError, Connection, connect_any

ERROR_NAMES = {
    0: None, 56: "KafkaStorageException", 57: "LogDirNotFoundException",
    -1: "UnknownServerException", 29: "ClusterAuthorizationException",
}


def error_name(code: int) -> str | None:
    return ERROR_NAMES.get(code, f"KafkaError({code})")


def describe(bootstrap: str, *, topics: list[str] | None = None,
             brokers: list[int] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The kafka-log-dirs.sh JSON and a list of problems (empty when all went well)."""
    problems: list[str] = []
    with connect_any(bootstrap) as conn:
        meta = conn.call(MetadataRequest(topics=None, allow_auto_topic_creation=False),
                         MetadataResponse, hi=8)
    nodes = {b.node_id: (b.host, b.port) for b in meta.brokers}
    wanted = sorted(nodes) if brokers is None else brokers
    request_topics = None
    if topics:
        by_topic = {t.name: [p.partition_index for p in t.partitions] for t in meta.topics}
        request_topics = [DescribeLogDirsRequest.DescribableLogDirTopic(
            topic=t, partitions=by_topic.get(t, [])) for t in topics]
    out: dict[str, Any] = {"version": 1, "brokers": []}
    for broker_id in wanted:
        if broker_id not in nodes:
            problems.append(f"broker {broker_id} is not in the cluster metadata")
            continue
        host, port = nodes[broker_id]
        try:
            with Connection(host, port) as conn:
                resp = conn.call(DescribeLogDirsRequest(topics=request_topics),
                                 DescribeLogDirsResponse, hi=4)
        except ClientError as err:
            problems.append(f"broker {broker_id}: {err}")
            continue
        if resp.version >= 3 and resp.error_code:
            problems.append(f"broker {broker_id}: DescribeLogDirs error {resp.error_code}")
        dirs = []
        for r in resp.results:
            entry: dict[str, Any] = {
                "logDir": r.log_dir, "error": error_name(r.error_code),
                "partitions": [
                    {"partition": f"{t.name}-{p.partition_index}", "size": p.partition_size,
                     "offsetLag": p.offset_lag, "isFuture": p.is_future_key}
                    for t in r.topics for p in t.partitions],
            }
            if resp.version >= 4 and r.total_bytes >= 0:
                entry["totalBytes"] = r.total_bytes
                entry["usableBytes"] = r.usable_bytes
            if r.error_code:
                problems.append(f"broker {broker_id}: log dir {r.log_dir}: "
                                f"{error_name(r.error_code)}")
            dirs.append(entry)
        out["brokers"].append({"broker": broker_id, "logDirs": dirs})
    return out, problems


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logkeeper log-dirs",
                                description="Describe the log dirs of brokers.")
    sub = p.add_subparsers(dest="action", required=True)
    d = sub.add_parser("describe", help="log dirs, partitions, sizes and lag per broker (JSON)")
    d.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]")
    d.add_argument("--topic-list", default="", help="comma-separated topics (default: all)")
    d.add_argument("--broker-list", default="", help="comma-separated broker ids (default: all)")
    return p


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    topics = [t for t in args.topic_list.split(",") if t] or None
    try:
        brokers = [int(b) for b in args.broker_list.split(",") if b] or None
    except ValueError:
        print(f"logkeeper log-dirs: --broker-list {args.broker_list!r} is not a list of "
              "integers", file=sys.stderr)
        return 2
    print("Querying brokers for log directories information", file=sys.stderr)
    try:
        out, problems = describe(args.bootstrap_server, topics=topics, brokers=brokers)
    except (ClientError, ValueError) as err:
        print(f"logkeeper log-dirs: {err}", file=sys.stderr)
        return 2
    answered = ",".join(str(b["broker"]) for b in out["brokers"])
    print(f"Received log directory information from brokers {answered}", file=sys.stderr)
    print(json.dumps(out, separators=(",", ":")))
    for problem in problems:
        print(f"logkeeper log-dirs: {problem}", file=sys.stderr)
    return 1 if problems else 0
