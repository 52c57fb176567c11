"""`logkeeper reassign-partitions`: what Kafka's `kafka-reassign-partitions.sh` does,
through the Kafka protocol (AlterPartitionReassignments, ListPartitionReassignments).

    logkeeper reassign-partitions --generate (--topics-to-move-json-file F | --topics T,T)
                                  --broker-list 1,2,3
    logkeeper reassign-partitions --reassignment-json-file F --execute [--additional]
                                  [--throttle B/s] [--replica-alter-log-dirs-throttle B/s]
                                  [--timeout MS] | --verify [--preserve-throttles] | --cancel
    logkeeper reassign-partitions --list

The reassignment file is Kafka's: `{"version":1,"partitions":[{"topic":"t","partition":0,
"replicas":[1,2],"log_dirs":["any","/data/d2"]}]}`, `log_dirs` optional. "any" leaves
the choice to the broker (its ONLINE, uncordoned dir with the most free space). A
replica whose entry names a log dir (an absolute path among its broker's `log.dirs`,
checked before anything is changed) is put there, as Kafka's tool does:
AlterReplicaLogDirs goes to its broker before the reassignment starts and after, every
0.1 s while the broker does not hold the replica yet, for up to `--timeout` ms (10000).
A broker keeps the dir for a replica it does not hold and creates it there when the
reassignment brings it; one it holds elsewhere is moved between its dirs while it keeps
serving (daemon.replica.moves). `--replica-alter-log-dirs-throttle B` caps those copies
on each broker named (`replica.alter.log.dirs.io.max.bytes.per.second`). `--verify`
then also says of each such replica whether it is in its dir, still being copied, or
elsewhere; `--cancel` moves back a copy under way.

`--generate` prints the current assignment and a proposed one that
spreads the topics' partitions over `--broker-list` at their replication factor
(Kafka's rack-unaware placement), both in that format. `--execute` prints the current
assignment first (to save for a rollback) and starts the moves at the controller;
they run in the background. While other reassignments are in progress it refuses
(exit 1), as Kafka's does, unless given `--additional`. `--verify` says of each partition whether its
reassignment is completed, still in progress, or done with replicas other than asked;
`--cancel` stops those in progress, putting their original replicas back, and removes
the throttles below (as Kafka's, unless given `--preserve-throttles`); `--list`
shows every reassignment in progress with its adding and removing replicas.

`--execute --throttle B` caps the copying at B bytes per second, as Kafka's does, before
the moves start (docs/cluster.md "Replication throttles"): each moving partition's
current replicas go in its topic's `leader.replication.throttled.replicas`, its new ones
in `follower.replication.throttled.replicas`, and every broker involved gets
`leader.replication.throttled.rate` and `follower.replication.throttled.rate` = B. A
`--verify` that finds nothing of the file still in progress removes them (from every
broker, and from the file's topics) unless given `--preserve-throttles`; run it until
then, or the throttles stay. A broker that does not answer then (hung) keeps its rates:
the others are cleared, the command names it and exits 1.

The broker asked is `--bootstrap-server`, else the listener of the daemon on this host
(that of `--config FILE`, or of the embedded defaults).

Exit codes: 0 done (for `--verify`: every partition's reassignment is complete, and
every replica of `log_dirs` in its dir); 1 a partition refused (the error code, its name
and the broker's message; the others started), a log dir move refused or not started
within `--timeout`, or for `--verify` one still in progress or on other replicas or
dirs; 2 a usage error, a bad file, or no broker reachable.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

from logstore.names import TopicPartition

from ..api.errors import REPLICA_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, name_of
from ..controller.leader_election import replica_assignment
from ..replica import quota
from . import configs
from .client import (
    ClientError,
    Connection,
    Refused,
    add_broker_options,
    at_controller,
    bootstrap_of,
    connect_any,
    metadata,
)
from .log_dirs import alter_replica_log_dirs, broker_addresses, describe

DEFAULT_TIMEOUT_MS = 30000
DEFAULT_MOVE_TIMEOUT_MS = 10000  # Kafka's --timeout: for log dir moves to start
MOVE_RETRY_S = 0.1  # Kafka's executeMoves asks again this often
Plan = dict[tuple[str, int], list[int]]
ReplicaDirs = dict[tuple[str, int, int], str]  # (topic, partition, broker): its log dir


class PlanError(ValueError):
    """A reassignment or topics file that cannot be used; names the file and the entry."""


class Busy(Exception):
    """--execute while reassignments are in progress, without --additional."""


class MovesFailed(Exception):
    """A log dir move a broker refused, or one not started within --timeout (exit 1)."""


def read_reassignment(path: str) -> tuple[Plan, ReplicaDirs]:
    """Kafka's reassignment JSON -> ({(topic, partition): replicas}, the replicas whose
    `log_dirs` entry names a log dir rather than "any", with that dir)."""
    where = f"{path}:"
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as err:
        raise PlanError(f"{path}: {err.strerror or err}") from err
    except json.JSONDecodeError as err:
        raise PlanError(f"{where} not JSON: {err}") from err
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise PlanError(f'{where} needs a non-empty "partitions" list')
    plan: Plan = {}
    dirs_of: ReplicaDirs = {}
    for i, e in enumerate(entries):
        at = f"{where} partitions[{i}]"
        if not isinstance(e, dict):
            raise PlanError(f"{at} is not an object")
        topic, partition, replicas = e.get("topic"), e.get("partition"), e.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise PlanError(f'{at} needs a "topic" name')
        if type(partition) is not int or partition < 0:
            raise PlanError(f'{at} needs a "partition" number')
        if (not isinstance(replicas, list) or not replicas
                or any(type(b) is not int for b in replicas)):
            raise PlanError(f'{at} needs "replicas", a non-empty list of broker ids')
        dirs = e.get("log_dirs")
        if dirs is not None:
            if not isinstance(dirs, list) or len(dirs) != len(replicas):
                raise PlanError(f'{at}: "log_dirs" needs one entry per replica')
            for broker, d in zip(replicas, dirs, strict=True):
                if not isinstance(d, str) or d != "any" and not os.path.isabs(d):
                    raise PlanError(f'{at}: each "log_dirs" entry is "any" or the absolute '
                                    f"path of a log dir of its broker (got {d!r})")
                if d != "any":
                    dirs_of[(topic, partition, broker)] = os.path.normpath(d)
        if (topic, partition) in plan:
            raise PlanError(f"{at}: {topic}-{partition} is named twice")
        plan[(topic, partition)] = list(replicas)
    return plan, dirs_of


def plan_json(plan: Plan) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())]}, separators=(",", ":"))


def _names(tps: Any) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(tps))


def current_assignment(bootstrap: str, topics: list[str]) -> tuple[Plan, dict[int, str | None]]:
    """(each partition's replicas, the cluster's brokers with their broker.rack), from
    Metadata; PlanError for a topic that is missing."""
    with connect_any(bootstrap) as conn:
        meta = metadata(conn, topics)
    out: Plan = {}
    for t in meta.topics:
        if t.error_code:
            raise PlanError(f"topic {t.name}: error {t.error_code} ({name_of(t.error_code)})")
        for p in t.partitions:
            out[(t.name, p.partition_index)] = list(p.replica_nodes)
    return out, {b.node_id: b.rack for b in sorted(meta.brokers, key=lambda b: b.node_id)}


def generate(bootstrap: str, topics: list[str], brokers: list[int],
             rng: random.Random | None = None, *, rack_aware: bool = True) -> tuple[Plan, Plan]:
    """(current, proposed): each topic's partitions spread over `brokers` at its
    replication factor, across their racks when every one has a broker.rack (unless
    `rack_aware` is False: kafka-reassign-partitions.sh's --disable-rack-aware)."""
    current, live = current_assignment(bootstrap, topics)
    unknown = sorted(set(brokers) - set(live))
    if unknown:
        raise PlanError(f"brokers {_ids(unknown)} of --broker-list are not in the cluster "
                        f"(brokers {_ids(sorted(live))})")
    rng = rng or random.Random()
    proposed: Plan = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        if rf > len(brokers):
            raise PlanError(f"topic {topic} has replication factor {rf}, more than the "
                            f"{len(brokers)} brokers of --broker-list")
        racks = {b: live[b] if rack_aware else None for b in brokers}
        placed = replica_assignment(racks, len(parts), rf, rng.randrange(len(brokers)),
                                    rng.randrange(len(brokers)))
        proposed.update({(topic, p): list(placed[i]) for i, p in enumerate(parts)})
    return current, proposed


def alter(bootstrap: str, wanted: dict[tuple[str, int], list[int] | None], *,
          timeout_ms: int = DEFAULT_TIMEOUT_MS) -> dict[tuple[str, int], tuple[int, str | None]]:
    """Start (replicas) or cancel (None) reassignments at the controller; each
    partition's (error code, message). Refused: a request-level error."""
    by_topic: dict[str, list[Any]] = {}
    T = AlterPartitionReassignmentsRequest.ReassignableTopic
    for (t, p), replicas in sorted(wanted.items()):
        by_topic.setdefault(t, []).append(T.ReassignablePartition(partition_index=p, replicas=replicas))

    def send(conn: Connection) -> tuple[int, str | None, Any]:
        resp = conn.call(AlterPartitionReassignmentsRequest(
            timeout_ms=timeout_ms, allow_replication_factor_change=True,
            topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()]),
            AlterPartitionReassignmentsResponse)
        return resp.error_code, resp.error_message, resp

    code, message, resp = at_controller(bootstrap, timeout_ms, send)
    if code:
        raise Refused(code, message)
    return {(t.name, p.partition_index): (p.error_code, p.error_message)
            for t in resp.responses for p in t.partitions}


def ongoing(bootstrap: str, *, timeout_ms: int = DEFAULT_TIMEOUT_MS,
            socket_timeout: float | None = None
            ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    """Every reassignment in progress: (replicas, adding, removing)."""
    def send(conn: Connection) -> tuple[int, str | None, Any]:
        resp = conn.call(ListPartitionReassignmentsRequest(timeout_ms=timeout_ms, topics=None),
                         ListPartitionReassignmentsResponse)
        return resp.error_code, resp.error_message, resp

    code, message, resp = at_controller(bootstrap, timeout_ms, send, socket_timeout=socket_timeout)
    if code:
        raise Refused(code, message)
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas),
                                          list(p.removing_replicas))
            for t in resp.topics for p in t.partitions}


def verify(bootstrap: str, plan: Plan) -> tuple[bool, bool, list[str], list[int]]:
    """(all complete, any still in progress, a line per partition, the live brokers), as
    kafka-reassign-partitions.sh --verify."""
    running = ongoing(bootstrap)
    current, live = current_assignment(bootstrap, sorted({t for t, _ in plan}))
    lines, done, in_progress = [], True, False
    for tp, target in sorted(plan.items()):
        name = f"{tp[0]}-{tp[1]}"
        if tp in running:
            done, in_progress = False, True
            lines.append(f"Reassignment of partition {name} is still in progress.")
        elif tp not in current:
            done = False
            lines.append(f"Partition {name} does not exist.")
        elif current[tp] != target:
            done = False
            lines.append(f"There is no active reassignment of partition {name}, but replica "
                         f"set is {_ids(current[tp])} rather than {_ids(target)}.")
        else:
            lines.append(f"Reassignment of partition {name} is completed.")
    return done, in_progress, lines, sorted(live)


# ---- log dir moves (the file's `log_dirs`) ----


def _replica(key: tuple[str, int, int]) -> str:
    """Kafka's TopicPartitionReplica: topic-partition-broker."""
    return f"{key[0]}-{key[1]}-{key[2]}"


def _by_broker(key: tuple[str, int, int]) -> tuple[int, str, int]:
    return key[2], key[0], key[1]


def check_dirs(bootstrap: str, dirs: ReplicaDirs) -> None:
    """Every dir named is one of its broker's log dirs (DescribeLogDirs), before
    anything is asked: a wrong path changes nothing. A broker not answering is left to
    `start_moves`' timeout."""
    described, _ = describe(bootstrap, topics=sorted({t for t, _, _ in dirs}),
                            brokers=sorted({b for _, _, b in dirs}))
    known = {e["broker"]: {os.path.normpath(d["logDir"]) for d in e["logDirs"]}
             for e in described["brokers"]}
    for key in sorted(dirs, key=_by_broker):
        b = key[2]
        if b in known and dirs[key] not in known[b]:
            raise MovesFailed(f"Failed to alter dir for {_replica(key)}: {dirs[key]} is not a "
                              f"log dir of broker {b} (its log dirs: "
                              f"{', '.join(sorted(known[b]))})")


def ask_moves(bootstrap: str, pending: ReplicaDirs) -> list[tuple[str, int, int]]:
    """One round of AlterReplicaLogDirs to each replica's broker: the replicas whose move
    started (or that are in their dir already). A replica its broker does not hold yet
    (REPLICA_NOT_AVAILABLE) is not among them, and the broker keeps the dir for it: it
    creates the replica there when the reassignment brings it. Any other refusal raises
    MovesFailed."""
    nodes = broker_addresses(bootstrap)
    started = []
    for broker in sorted({b for _, _, b in pending}):
        if broker not in nodes:
            continue  # not running now
        want = {TopicPartition(t, p): d for (t, p, b), d in pending.items() if b == broker}
        for tp, code in alter_replica_log_dirs(nodes[broker], want).items():
            key = (tp.topic, tp.partition, broker)
            if code == 0:
                started.append(key)
            elif code != REPLICA_NOT_AVAILABLE:
                raise MovesFailed(f"Failed to alter dir for {_replica(key)}: error {code} "
                                  f"({name_of(code)})")
    return started


def start_moves(bootstrap: str, dirs: ReplicaDirs, timeout_ms: int,
                started: list[tuple[str, int, int]] | None = None) -> None:
    """Kafka's executeMoves: `ask_moves` every MOVE_RETRY_S until every replica's move
    has started (those in `started` already had), printing each, for up to
    `timeout_ms`; MovesFailed after that."""
    pending = dict(dirs)
    deadline = time.monotonic() + timeout_ms / 1000
    done = list(started or [])
    while True:
        done += ask_moves(bootstrap, {k: d for k, d in pending.items() if k not in done})
        for key in sorted(done, key=_by_broker):
            print(f"Successfully started moving log directory to {pending.pop(key)} for "
                  f"replica {key[0]}-{key[1]} with broker {key[2]} ")
        done = []
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise MovesFailed(
                f"Timed out before log directory move{'s' * (len(pending) != 1)} could be "
                f"started for: {','.join(_replica(k) for k in sorted(pending, key=_by_broker))}")
        time.sleep(MOVE_RETRY_S)


def move_states(bootstrap: str, dirs: ReplicaDirs
                ) -> dict[tuple[str, int, int], tuple[str, str | None, str | None]]:
    """Kafka's findLogDirMoveStates, from DescribeLogDirs of each broker named: per
    replica (state, its current dir, its future dir). States: "completed" (in its target
    dir), "active" (being copied), "cancelled" (elsewhere, not moving), "missing" (no
    live dir of its broker holds it) and "missing-dir" (the same, with a dir of that
    broker offline)."""
    brokers = sorted({b for _, _, b in dirs})
    described, _ = describe(bootstrap, topics=sorted({t for t, _, _ in dirs}), brokers=brokers)
    found: dict[tuple[str, int, int], list[str | None]] = {}
    offline: set[int] = set()
    for entry in described["brokers"]:
        b = entry["broker"]
        for d in entry["logDirs"]:
            if d["error"]:
                offline.add(b)
            for part in d["partitions"]:
                t, _, p = part["partition"].rpartition("-")
                where = found.setdefault((t, int(p), b), [None, None])
                where[1 if part["isFuture"] else 0] = os.path.normpath(d["logDir"])
    states = {}
    for key, target in dirs.items():
        current, future = found.get(key, (None, None))
        if current is None:
            state = "missing-dir" if key[2] in offline else "missing"
        elif future is not None:
            state = "active"
        else:
            state = "completed" if current == target else "cancelled"
        states[key] = (state, current, future)
    return states


def move_lines(dirs: ReplicaDirs,
               states: dict[tuple[str, int, int], tuple[str, str | None, str | None]]
               ) -> list[str]:
    """Kafka's replicaMoveStatesToString."""
    lines = []
    for key in sorted(states, key=_by_broker):
        (state, current, future), target = states[key], dirs[key]
        t, p, b = key
        if state == "missing-dir":
            lines.append(f"Partition {t}-{p} is not found in any live log dir on broker {b}. "
                         "There is likely an offline log directory on the broker.")
        elif state == "missing":
            lines.append(f"Partition {t}-{p} cannot be found in any live log directory on "
                         f"broker {b}.")
        elif state == "active" and future == target:
            lines.append(f"Reassignment of replica {_replica(key)} is still in progress.")
        elif state == "active":
            lines.append(f"Partition {t}-{p} on broker {b} is being moved to log dir {future} "
                         f"instead of {target}.")
        elif state == "cancelled":
            lines.append(f"Partition {t}-{p} on broker {b} is not being moved from log dir "
                         f"{current} to {target}.")
        else:
            lines.append(f"Reassignment of replica {_replica(key)} completed successfully.")
    return lines


# ---- throttles ----

Moves = dict[tuple[str, int], tuple[list[int], list[int]]]  # (sources, destinations)


def proposed_moves(plan: Plan, current: Plan,
                   running: dict[tuple[str, int], tuple[list[int], list[int], list[int]]]) -> Moves:
    """Kafka's calculateProposedMoveMap: for every partition of `plan` and every one
    being reassigned, the replicas the data comes from (the current ones; for one in
    progress, its original ones) and the replicas it goes to (those not among them)."""
    moves: Moves = {}
    for tp, (replicas, adding, _removing) in running.items():
        moves[tp] = ([r for r in replicas if r not in adding], list(adding))
    for tp, target in plan.items():
        sources = moves[tp][0] if tp in moves else current.get(tp, [])
        moves[tp] = (sources, [r for r in target if r not in sources])
    return moves


def throttled_replicas(moves: Moves) -> dict[str, tuple[str, str]]:
    """Per topic: (its leader.replication.throttled.replicas, its follower one)."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for (t, p), (sources, destinations) in sorted(moves.items()):
        leader, follower = out.setdefault(t, ([], []))
        leader += [f"{p}:{b}" for b in sources]
        follower += [f"{p}:{b}" for b in destinations]
    return {t: (",".join(lead), ",".join(follow)) for t, (lead, follow) in out.items()}


def set_throttles(bootstrap: str, moves: Moves, rate: int) -> None:
    """Kafka's modifyReassignmentThrottle: the topics' throttled replicas, then the rate
    on every broker a move reads from or writes to."""
    for topic, (leader, follower) in sorted(throttled_replicas(moves).items()):
        add = {quota.LEADER_REPLICAS: leader}
        if follower:
            add[quota.FOLLOWER_REPLICAS] = follower
        configs.alter(bootstrap, configs.TOPIC, topic, add, [])
    brokers = sorted({b for sources, dests in moves.values() for b in sources + dests})
    for b in brokers:
        configs.alter(bootstrap, configs.BROKER, str(b),
                      {quota.LEADER_RATE: str(rate), quota.FOLLOWER_RATE: str(rate)}, [])


def clear_throttles(bootstrap: str, plan: Plan, live: list[int]) -> tuple[list[str], list[str]]:
    """Kafka's clearAllThrottles: the rates off every broker of the cluster (`live`; those
    of the plan not running are named, their znodes kept), the throttled replicas off the
    plan's topics. What it did, as lines, and the brokers that did not answer (a hung
    one: the others are cleared all the same), as problems."""
    brokers = sorted(set(live) | {b for target in plan.values() for b in target})
    topics = sorted({t for t, _ in plan})
    lines = [f"Clearing broker-level throttles on broker{'s' * (len(brokers) != 1)} "
             f"{_ids(brokers)}"]
    problems = []
    for b in brokers:
        if b in live:  # a broker not running has nobody to ask; its znode keeps them
            try:
                configs.alter(bootstrap, configs.BROKER, str(b), {},
                              [quota.LEADER_RATE, quota.FOLLOWER_RATE, quota.ALTER_LOG_DIRS_RATE])
            except ClientError as err:
                problems.append(f"the throttles of broker {b} are not removed ({err}); run "
                                "--verify again once it answers")
    lines.append(f"Clearing topic-level throttles on topic{'s' * (len(topics) != 1)} "
                 f"{','.join(topics)}")
    for t in topics:
        try:
            configs.alter(bootstrap, configs.TOPIC, t, {},
                          [quota.LEADER_REPLICAS, quota.FOLLOWER_REPLICAS])
        except Refused as err:
            if err.code != UNKNOWN_TOPIC_OR_PARTITION:  # a deleted topic has none left
                raise
    return lines, problems


def _clear(bootstrap: str, plan: Plan, live: list[int]) -> bool:
    """`clear_throttles`, printed; False when a broker's could not be removed."""
    lines, problems = clear_throttles(bootstrap, plan, live)
    print("\n".join(lines))
    for line in problems:
        print(f"logkeeper reassign-partitions: {line}", file=sys.stderr)
    return not problems


def _ids(xs: list[int]) -> str:
    return ",".join(str(x) for x in xs)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logkeeper reassign-partitions", description=(
        "Move partitions' replicas between brokers, as Kafka's kafka-reassign-partitions.sh."))
    add_broker_options(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true",
                        help="propose an assignment of --topics over --broker-list")
    action.add_argument("--execute", action="store_true",
                        help="start the reassignment of --reassignment-json-file")
    action.add_argument("--verify", action="store_true",
                        help="whether the reassignment of --reassignment-json-file is done")
    action.add_argument("--cancel", action="store_true",
                        help="cancel the reassignments of --reassignment-json-file in progress")
    action.add_argument("--list", action="store_true", help="the reassignments in progress")
    p.add_argument("--additional", action="store_true",
                   help="with --execute: start it while other reassignments are in progress")
    p.add_argument("--throttle", type=int, default=None, metavar="B/s",
                   help="with --execute: cap the replicas' copying at this many bytes per "
                        "second (removed by a --verify that finds it done)")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=None, metavar="B/s",
                   help="with --execute: cap the copying of replicas between a broker's log "
                        "dirs (the file's log_dirs) at this many bytes per second")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="with --verify or --cancel: keep the throttles (by default "
                        "removed once nothing of the file is in progress, and by --cancel)")
    p.add_argument("--reassignment-json-file", metavar="FILE")
    p.add_argument("--topics-to-move-json-file", metavar="FILE",
                   help='for --generate: {"version":1,"topics":[{"topic":"t"}]}')
    p.add_argument("--topics", metavar="T[,T]", help="for --generate: instead of the JSON file")
    p.add_argument("--broker-list", metavar="1,2,3", help="for --generate: the brokers to use")
    p.add_argument("--disable-rack-aware", action="store_true",
                   help="for --generate: spread replicas over the brokers without regard to "
                        "their broker.rack")
    p.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS,
                   help="how long the controller may take to answer (ms)")
    p.add_argument("--timeout", type=int, default=DEFAULT_MOVE_TIMEOUT_MS, metavar="MS",
                   help="how long to wait for the log dir moves of the file's log_dirs to "
                        f"start (default {DEFAULT_MOVE_TIMEOUT_MS})")
    return p


def _topics_to_move(args: argparse.Namespace) -> list[str]:
    if args.topics:
        return [t for t in args.topics.split(",") if t]
    path = args.topics_to_move_json_file
    if not path:
        raise PlanError("--generate needs --topics-to-move-json-file or --topics")
    try:
        doc = json.loads(Path(path).read_text())
        topics = [e["topic"] for e in doc["topics"]]
    except OSError as err:
        raise PlanError(f"{path}: {err.strerror or err}") from err
    except (ValueError, KeyError, TypeError) as err:
        raise PlanError(f'{path}: needs {{"topics":[{{"topic":"name"}}, ...]}} ({err})') from err
    if not topics or not all(isinstance(t, str) and t for t in topics):
        raise PlanError(f"{path}: no topic names")
    return topics


def _broker_list(text: str | None) -> list[int]:
    try:
        brokers = [int(b) for b in (text or "").split(",") if b.strip()]
    except ValueError as err:
        raise PlanError(f"--broker-list {text!r}: not a comma-separated list of broker ids") from err
    if not brokers or len(set(brokers)) != len(brokers):
        raise PlanError("--generate needs --broker-list with distinct broker ids")
    return brokers


def _refusals(results: dict[tuple[str, int], tuple[int, str | None]]) -> list[str]:
    return [f"{t}-{p}: error {code} ({name_of(code)}): {(msg or '').rstrip('.') or 'no message'}"
            for (t, p), (code, msg) in sorted(results.items()) if code]


def _run(args: argparse.Namespace, bootstrap: str) -> int:
    for option, value in (("--throttle", args.throttle),
                          ("--replica-alter-log-dirs-throttle", args.replica_alter_log_dirs_throttle)):
        if value is not None and (not args.execute or value < 0):
            raise PlanError(f"{option} goes with --execute, as a number of bytes per second "
                            f"(got {value})" if args.execute else f"{option} goes with --execute")
    if args.preserve_throttles and not (args.verify or args.cancel):
        raise PlanError("--preserve-throttles goes with --verify or --cancel")
    if args.list:
        running = ongoing(bootstrap, timeout_ms=args.timeout_ms)
        if not running:
            print("No partition reassignments found.")
            return 0
        print("Current partition reassignments:")
        for (t, p), (replicas, adding, removing) in sorted(running.items()):
            print(f"{t}-{p}: replicas: {_ids(replicas)}. adding: {_ids(adding)}. "
                  f"removing: {_ids(removing)}.")
        return 0
    if args.generate:
        current, proposed = generate(bootstrap, _topics_to_move(args),
                                     _broker_list(args.broker_list),
                                     rack_aware=not args.disable_rack_aware)
        print("Current partition replica assignment")
        print(plan_json(current))
        print()
        print("Proposed partition reassignment configuration")
        print(plan_json(proposed))
        return 0
    if not args.reassignment_json_file:
        raise PlanError("--execute, --verify and --cancel need --reassignment-json-file")
    plan, dirs = read_reassignment(args.reassignment_json_file)
    if args.verify:
        done, in_progress, lines, live = verify(bootstrap, plan)
        print("Status of partition reassignment:")
        print("\n".join(lines))
        if dirs:
            states = move_states(bootstrap, dirs)
            print("\n".join(move_lines(dirs, states)))
            done = done and all(st == "completed" for st, _, _ in states.values())
            in_progress = in_progress or any(st not in ("completed", "cancelled")
                                             for st, _, _ in states.values())
        cleared = True
        if not in_progress and not args.preserve_throttles:
            cleared = _clear(bootstrap, plan, live)
        return 0 if done and cleared else 1
    cleared = True
    if args.execute:
        running = ongoing(bootstrap, timeout_ms=args.timeout_ms)
        if running and not args.additional:
            raise Busy("Cannot execute because there is an existing partition assignment "
                       f"({_names(running)}). Use --additional to override this and create a "
                       "new partition assignment in addition to the existing one.")
        current, _ = current_assignment(bootstrap, sorted({t for t, _ in plan}))
        print("Current partition replica assignment")
        print()
        print(plan_json({tp: r for tp, r in current.items() if tp in plan}))
        print()
        print("Save this to use as the --reassignment-json-file option during rollback")
        if dirs:
            check_dirs(bootstrap, dirs)
        log_dir_rate = args.replica_alter_log_dirs_throttle
        if args.throttle is not None or log_dir_rate is not None:
            print("Warning: You must run --verify periodically, until the reassignment "
                  "completes, to ensure the throttle is removed.")
        if args.throttle is not None:
            set_throttles(bootstrap, proposed_moves(plan, current, running), args.throttle)
            print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
        if log_dir_rate is not None:
            # Kafka's modifyLogDirThrottle: on the brokers of the file's log dir moves.
            for b in sorted({b for _, _, b in dirs}):
                configs.alter(bootstrap, configs.BROKER, str(b),
                              {quota.ALTER_LOG_DIRS_RATE: str(log_dir_rate)}, [])
            print(f"The replica-alter-dir throttle limit was set to {log_dir_rate} B/s")
        # Asked before the reassignment too (as Kafka's tool did up to 2.x): a replica
        # on its way to a broker is then created in its dir, not created elsewhere and
        # copied over after.
        early = ask_moves(bootstrap, dirs) if dirs else []
        results = alter(bootstrap, dict(plan), timeout_ms=args.timeout_ms)
        started = [tp for tp, (code, _) in results.items() if not code]
        if started:
            print(f"Successfully started partition reassignments for {_names(started)}")
        if dirs and not _refusals(results):
            start_moves(bootstrap, dirs, args.timeout, early)
    else:
        running = ongoing(bootstrap, timeout_ms=args.timeout_ms)
        active = {tp: None for tp in plan if tp in running}
        results = alter(bootstrap, active, timeout_ms=args.timeout_ms) if active else {}
        cancelled = [tp for tp, (code, _) in results.items() if not code]
        if cancelled:
            print(f"Successfully cancelled partition reassignments for: {_names(cancelled)}")
        elif not active:
            print("None of the specified partition reassignments are active.")
        if dirs:
            # Kafka's cancelAssignment: a replica being copied to another dir of its
            # broker is moved back to (kept in) the dir it is served from.
            states = move_states(bootstrap, dirs)
            back = {k: cur for k, (st, cur, _) in states.items() if st == "active" and cur}
            if back:
                start_moves(bootstrap, back, args.timeout)
            else:
                print("None of the specified partition moves are active.")
        if not args.preserve_throttles:
            # As Kafka's cancelAssignment: the throttles go with the moves.
            cleared = _clear(bootstrap, plan, sorted(broker_addresses(bootstrap)))
    refused = _refusals(results)
    for line in refused:
        print(f"logkeeper reassign-partitions: {line}", file=sys.stderr)
    return 1 if refused or not cleared else 0


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return _run(args, bootstrap_of(args))
    except Refused as err:
        print(f"logkeeper reassign-partitions: refused: {err}", file=sys.stderr)
        return 1
    except (Busy, MovesFailed) as err:
        print(f"logkeeper reassign-partitions: {err}", file=sys.stderr)
        return 1
    except (ClientError, ValueError) as err:  # PlanError and ConfigError are ValueErrors
        print(f"logkeeper reassign-partitions: {err}", file=sys.stderr)
        return 2
