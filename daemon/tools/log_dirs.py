"""`logkeeper log-dirs`: describe log dirs per broker; move replicas between a broker's
dirs; readmit, cordon, uncordon one.

`describe` goes through the DescribeLogDirs API, `move` through AlterReplicaLogDirs
(what kafka-reassign-partitions.sh sends for its `log_dirs`): `move --broker N DIR
t-0 t-1` (or `--from SRC DIR`: every replica in SRC, to drain a disk) starts the moves
and prints `{"version":1,"broker":N,"partitions":[{"partition":
"t-0","logDir":DIR,"error":null|"<name>"}]}`; with `--wait S` it returns once
DescribeLogDirs shows each partition in DIR with no copy under way.

Output (stdout) is the JSON that Kafka's `kafka-log-dirs.sh --describe` prints:
`{"version":1,"brokers":[{"broker":N,"logDirs":[{"logDir":...,"error":null|"<name>",
"partitions":[{"partition":"t-0","size":S,"offsetLag":L,"isFuture":false}]}]}]}`, plus
`totalBytes`/`usableBytes` per dir where the broker reports them (DescribeLogDirs v4+).
The broker list comes from Metadata; `--broker-list` narrows it.

With `--http HOST:PORT` (the broker's http.listen) each dir of that broker also gets
`state` (online, saturated, offline), `degraded` (a slow disk), `cordoned` and the
reason it is not online, which the Kafka protocol has no field for.

`readmit DIR`, `cordon DIR` and `uncordon DIR` are operator commands for the daemon on
this host, sent to its HTTP endpoint (`--http`, or the `http.listen` of `--config`,
default 127.0.0.1:9308). `readmit` brings a repaired OFFLINE dir back without a
restart (probe, lock, recover, serve); `cordon` stops new partitions from being placed
in a dir (kept across restarts), `uncordon` allows them again. `status` prints the
daemon's own view of its dirs (JSON).

Exit codes: 0 when every broker answered (or the command was carried out), 1 when a
broker failed or reported a dir error (or the daemon refused the command, saying why),
2 on a usage error or when no broker or daemon can be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from kafka.protocol.admin import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from logstore import names
from logstore.names import TopicPartition

from ..api.errors import java_name
from .client import ClientError, Connection, connect_any


def broker_addresses(bootstrap: str) -> dict[int, tuple[str, int]]:
    """Each broker of the cluster's (host, port), from Metadata."""
    with connect_any(bootstrap) as conn:
        meta = conn.call(MetadataRequest(topics=None, allow_auto_topic_creation=False),
                         MetadataResponse, hi=8)
    return {b.node_id: (b.host, b.port) for b in meta.brokers}


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
                "logDir": r.log_dir, "error": java_name(r.error_code),
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
                                f"{java_name(r.error_code)}")
            dirs.append(entry)
        out["brokers"].append({"broker": broker_id, "logDirs": dirs})
    return out, problems


def move(bootstrap: str, broker: int, log_dir: str, partitions: list[TopicPartition], *,
         wait: float = 0.0) -> tuple[list[dict[str, Any]], list[str]]:
    """AlterReplicaLogDirs to `broker`: its replicas of `partitions` move to `log_dir`
    (kafka-reassign-partitions.sh's `log_dirs`). With `wait`, up to that many seconds
    until DescribeLogDirs shows each one there and no copy under way. Returns one entry
    per partition and the problems."""
    nodes = broker_addresses(bootstrap)
    if broker not in nodes:
        raise ClientError(f"broker {broker} is not in the cluster metadata "
                          f"(brokers: {sorted(nodes)})")
    topics = sorted({tp.topic for tp in partitions})
    codes = alter_replica_log_dirs(nodes[broker], {tp: log_dir for tp in partitions})
    entries = {f"{tp.topic}-{tp.partition}": java_name(code) for tp, code in codes.items()}
    problems = [f"{name}: {err}" for name, err in entries.items() if err]
    moving = {name for name, err in entries.items() if not err}
    deadline = time.monotonic() + wait
    while wait and moving:
        out, _ = describe(bootstrap, topics=topics, brokers=[broker])
        dirs = out["brokers"][0]["logDirs"] if out["brokers"] else []
        done = {p["partition"] for d in dirs if d["logDir"] == log_dir
                for p in d["partitions"] if not p["isFuture"]}
        copying = {p["partition"] for d in dirs for p in d["partitions"] if p["isFuture"]}
        moving -= done - copying
        if not moving:
            break
        if time.monotonic() > deadline:
            problems += [f"{name}: still moving after {wait:g} s" for name in sorted(moving)]
            break
        time.sleep(0.5)
    return [{"partition": name, "logDir": log_dir, "error": err}
            for name, err in entries.items()], problems


def alter_replica_log_dirs(address: tuple[str, int], dirs: dict[TopicPartition, str]
                           ) -> dict[TopicPartition, int]:
    """AlterReplicaLogDirs to the broker at `address`: each of its replicas to the log
    dir given; the broker's error code for each (0: the move started or was not needed;
    9 REPLICA_NOT_AVAILABLE: not hosted there yet, created in that dir when it comes)."""
    by_dir: dict[str, dict[str, list[int]]] = {}
    for tp, d in dirs.items():
        by_dir.setdefault(d, {}).setdefault(tp.topic, []).append(tp.partition)
    D = AlterReplicaLogDirsRequest.AlterReplicaLogDir
    req = AlterReplicaLogDirsRequest(dirs=[D(path=d, topics=[
        D.AlterReplicaLogDirTopic(name=t, partitions=ps) for t, ps in topics.items()])
        for d, topics in by_dir.items()])
    with Connection(*address) as conn:
        resp = conn.call(req, AlterReplicaLogDirsResponse, lo=1, hi=2)
    return {TopicPartition(t.topic_name, p.partition_index): p.error_code
            for t in resp.results for p in t.partitions}


class DaemonError(Exception):
    """The daemon's HTTP endpoint could not be reached (exit 2)."""


def daemon_call(http: str, path: str, payload: dict[str, Any] | None = None
                ) -> tuple[int, Any]:
    """GET (or POST `payload` to) the daemon's HTTP endpoint; (status, decoded JSON)."""
    url = f"http://{http}{path}"
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, method="GET" if data is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        try:
            return err.code, json.loads(err.read())
        except ValueError:
            return err.code, {"error": f"HTTP {err.code} from {url}"}
    except (OSError, ValueError) as err:
        raise DaemonError(f"cannot reach the daemon at {url}: {err}") from err


def _http_address(args: argparse.Namespace) -> str:
    if args.http:
        return args.http
    from .. import config as config_mod

    cfg = config_mod.load(args.config)
    if cfg.http_listen is None:
        raise config_mod.ConfigError(f"{cfg.source}: http.listen is off; the commands need it")
    return config_mod.local_address(*cfg.http_listen)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logkeeper log-dirs",
        description="Describe log dirs, move replicas between them, readmit, cordon or "
                    "uncordon one.")
    sub = p.add_subparsers(dest="action", required=True)
    d = sub.add_parser("describe", help="log dirs, partitions, sizes and lag per broker (JSON)")
    d.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]")
    d.add_argument("--topic-list", default="", help="comma-separated topics (default: all)")
    d.add_argument("--broker-list", default="", help="comma-separated broker ids (default: all)")
    d.add_argument("--http", metavar="HOST:PORT",
                   help="the daemon's http.listen: add state, degraded and cordoned per dir")
    m = sub.add_parser("move", help="move a broker's replicas to another of its log dirs "
                                    "(AlterReplicaLogDirs), while they keep serving")
    m.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]")
    m.add_argument("--broker", required=True, type=int, help="the broker whose replicas move")
    m.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait until the moves are done (DescribeLogDirs), up to SECONDS")
    m.add_argument("--from", dest="source", metavar="DIR",
                   help="move every replica the broker holds in DIR (drain a disk)")
    m.add_argument("dir", metavar="DIR", help="the destination: one of that broker's log.dirs")
    m.add_argument("partitions", nargs="*", metavar="TOPIC-PARTITION")
    for name, help_ in (("readmit", "bring a repaired OFFLINE dir back without a restart"),
                        ("cordon", "place no new partitions in DIR"),
                        ("uncordon", "allow new partitions in DIR again"),
                        ("status", "this host's dirs as the daemon sees them (JSON)")):
        c = sub.add_parser(name, help=help_)
        if name != "status":
            c.add_argument("dir", metavar="DIR")
        where = c.add_mutually_exclusive_group()
        where.add_argument("--http", metavar="HOST:PORT", help="the daemon's http.listen")
        where.add_argument("--config", metavar="FILE",
                           help="the daemon's config, to find its http.listen")
    return p


def _command(args: argparse.Namespace) -> int:
    import os

    from ..config import ConfigError

    try:
        http = _http_address(args)
        if args.action == "status":
            status, answer = daemon_call(http, "/log-dirs")
        else:
            status, answer = daemon_call(http, f"/admin/log-dirs/{args.action}",
                                         {"dir": os.path.abspath(args.dir)})
    except (ConfigError, DaemonError) as err:
        print(f"logkeeper log-dirs {args.action}: {err}", file=sys.stderr)
        return 2
    if status != 200:
        print(f"logkeeper log-dirs {args.action}: {answer.get('error', answer)}",
              file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=1 if args.action == "status" else None))
    return 0


def _move(args: argparse.Namespace) -> int:
    given = list(args.partitions)
    if not given and not args.source:
        print("logkeeper log-dirs move: name the partitions, or --from DIR for all of a "
              "dir's", file=sys.stderr)
        return 2
    try:
        if args.source:
            out, problems = describe(args.bootstrap_server, brokers=[args.broker])
            if problems:
                raise ClientError("; ".join(problems))
            dirs = {d["logDir"]: d for b in out["brokers"] for d in b["logDirs"]}
            if args.source not in dirs:
                raise ClientError(f"broker {args.broker} has no log dir {args.source} "
                                  f"(it has {', '.join(sorted(dirs))})")
            given += [p["partition"] for p in dirs[args.source]["partitions"]
                      if not p["isFuture"] and p["partition"] not in given]
    except (ClientError, ValueError) as err:
        print(f"logkeeper log-dirs move: {err}", file=sys.stderr)
        return 2
    tps = [names.parse_partition_dir(p) for p in given]
    bad = [p for p, tp in zip(given, tps, strict=True) if tp is None]
    if bad:
        print(f"logkeeper log-dirs move: not TOPIC-PARTITION: {', '.join(bad)}", file=sys.stderr)
        return 2
    if not tps:
        print(json.dumps({"version": 1, "broker": args.broker, "partitions": []}))
        return 0
    try:
        out, problems = move(args.bootstrap_server, args.broker, args.dir,
                             [tp for tp in tps if tp is not None], wait=args.wait)
    except (ClientError, ValueError) as err:
        print(f"logkeeper log-dirs move: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"version": 1, "broker": args.broker, "partitions": out},
                     separators=(",", ":")))
    for problem in problems:
        print(f"logkeeper log-dirs move: {problem}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.action == "move":
        return _move(args)
    if args.action != "describe":
        return _command(args)
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
    if args.http:
        try:
            _, states = daemon_call(args.http, "/log-dirs")
        except DaemonError as err:
            print(f"logkeeper log-dirs: {err}", file=sys.stderr)
            return 2
        by_path = {s["path"]: s for s in states}
        for b in out["brokers"]:
            for entry in b["logDirs"]:
                s = by_path.get(entry["logDir"])
                if s is not None:
                    entry.update(state=s["state"], degraded=s["degraded"],
                                 cordoned=s["cordoned"], reason=s["error"])
    answered = ",".join(str(b["broker"]) for b in out["brokers"])
    print(f"Received log directory information from brokers {answered}", file=sys.stderr)
    print(json.dumps(out, separators=(",", ":")))
    for problem in problems:
        print(f"logkeeper log-dirs: {problem}", file=sys.stderr)
    return 1 if problems else 0
