"""`logkeeper reassign-partitions`: what Kafka's `kafka-reassign-partitions.sh` does,
through the Kafka protocol (AlterPartitionReassignments, ListPartitionReassignments).

    logkeeper reassign-partitions --generate (--topics-to-move-json-file F | --topics T,T)
                                  --broker-list 1,2,3
    logkeeper reassign-partitions --reassignment-json-file F --execute [--additional]
                                  [--throttle B/s] | --verify [--preserve-throttles] | --cancel
    logkeeper reassign-partitions --list

The reassignment file is Kafka's: `{"version":1,"partitions":[{"topic":"t","partition":0,
"replicas":[1,2]}]}`, with `log_dirs` allowed only as "any" for each replica (a replica
is placed on its new broker's dir with the most free space; `logkeeper log-dirs move`
moves it after). `--generate` prints the current assignment and a proposed one that
spreads the topics' partitions over `--broker-list` at their replication factor
(Kafka's rack-unaware placement), both in that format. `--execute` prints the current
assignment first (to save for a rollback) and starts the moves at the controller;
they run in the background. While other reassignments are in progress it refuses
(exit 1), as Kafka's does, unless given `--additional`. `--verify` says of each partition whether its
reassignment is completed, still in progress, or done with replicas other than asked;
`--cancel` stops those in progress, putting their original replicas back; `--list`
shows every reassignment in progress with its adding and removing replicas.

`--execute --throttle B` caps the copying at B bytes per second, as Kafka's does, before
the moves start (docs/cluster.md "Replication throttles"): each moving partition's
current replicas go in its topic's `leader.replication.throttled.replicas`, its new ones
in `follower.replication.throttled.replicas`, and every broker involved gets
`leader.replication.throttled.rate` and `follower.replication.throttled.rate` = B. A
`--verify` that finds nothing of the file still in progress removes them (from every
broker, and from the file's topics) unless given `--preserve-throttles`; run it until
then, or the throttles stay.

The broker asked is `--bootstrap-server`, else the listener of the daemon on this host
(that of `--config FILE`, or of the embedded defaults).

Exit codes: 0 done (for `--verify`: every partition's reassignment is complete); 1 a
partition refused (the error code, its name and the broker's message; the others
started), or for `--verify` one still in progress or on other replicas; 2 a usage
error, a bad file, or no broker reachable.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

from ..api.errors import UNKNOWN_TOPIC_OR_PARTITION, name_of
from ..controller.leader_election import round_robin_assignment
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

DEFAULT_TIMEOUT_MS = 30000
Plan = dict[tuple[str, int], list[int]]


class PlanError(ValueError):
    """A reassignment or topics file that cannot be used; names the file and the entry."""


class Busy(Exception):
    """--execute while reassignments are in progress, without --additional."""


def read_plan(path: str) -> Plan:
    """Kafka's reassignment JSON -> {(topic, partition): replicas}."""
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
            if any(d != "any" for d in dirs):
                raise PlanError(f'{at}: "log_dirs" other than "any" are not supported: the '
                                "replica goes to its broker's dir with the most free space; "
                                "move it after with `logkeeper log-dirs move`")
        if (topic, partition) in plan:
            raise PlanError(f"{at}: {topic}-{partition} is named twice")
        plan[(topic, partition)] = list(replicas)
    return plan


def plan_json(plan: Plan) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())]}, separators=(",", ":"))


def _names(tps: Any) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(tps))


def current_assignment(bootstrap: str, topics: list[str]) -> tuple[Plan, list[int]]:
    """(each partition's replicas, the cluster's brokers), from Metadata; PlanError for
    a topic that is missing."""
    with connect_any(bootstrap) as conn:
        meta = metadata(conn, topics)
    out: Plan = {}
    for t in meta.topics:
        if t.error_code:
            raise PlanError(f"topic {t.name}: error {t.error_code} ({name_of(t.error_code)})")
        for p in t.partitions:
            out[(t.name, p.partition_index)] = list(p.replica_nodes)
    return out, sorted(b.node_id for b in meta.brokers)


def generate(bootstrap: str, topics: list[str], brokers: list[int],
             rng: random.Random | None = None) -> tuple[Plan, Plan]:
    """(current, proposed): each topic's partitions spread over `brokers` at its
    replication factor."""
    current, live = current_assignment(bootstrap, topics)
    unknown = sorted(set(brokers) - set(live))
    if unknown:
        raise PlanError(f"brokers {_ids(unknown)} of --broker-list are not in the cluster "
                        f"(brokers {_ids(live)})")
    rng = rng or random.Random()
    proposed: Plan = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        if rf > len(brokers):
            raise PlanError(f"topic {topic} has replication factor {rf}, more than the "
                            f"{len(brokers)} brokers of --broker-list")
        placed = round_robin_assignment(brokers, len(parts), rf, rng.randrange(len(brokers)),
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
    return done, in_progress, lines, live


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


def clear_throttles(bootstrap: str, plan: Plan, live: list[int]) -> list[str]:
    """Kafka's clearAllThrottles: the rates off every broker of the cluster (`live`; those
    of the plan not running are named, their znodes kept), the throttled replicas off the
    plan's topics. What it did, as lines."""
    brokers = sorted(set(live) | {b for target in plan.values() for b in target})
    topics = sorted({t for t, _ in plan})
    lines = [f"Clearing broker-level throttles on broker{'s' * (len(brokers) != 1)} "
             f"{_ids(brokers)}"]
    for b in brokers:
        if b in live:  # a broker not running has nobody to ask; its znode keeps them
            configs.alter(bootstrap, configs.BROKER, str(b), {},
                          [quota.LEADER_RATE, quota.FOLLOWER_RATE, quota.ALTER_LOG_DIRS_RATE])
    lines.append(f"Clearing topic-level throttles on topic{'s' * (len(topics) != 1)} "
                 f"{','.join(topics)}")
    for t in topics:
        try:
            configs.alter(bootstrap, configs.TOPIC, t, {},
                          [quota.LEADER_REPLICAS, quota.FOLLOWER_REPLICAS])
        except Refused as err:
            if err.code != UNKNOWN_TOPIC_OR_PARTITION:  # a deleted topic has none left
                raise
    return lines


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
    p.add_argument("--preserve-throttles", action="store_true",
                   help="with --verify: keep the throttles even when the moves are done")
    p.add_argument("--reassignment-json-file", metavar="FILE")
    p.add_argument("--topics-to-move-json-file", metavar="FILE",
                   help='for --generate: {"version":1,"topics":[{"topic":"t"}]}')
    p.add_argument("--topics", metavar="T[,T]", help="for --generate: instead of the JSON file")
    p.add_argument("--broker-list", metavar="1,2,3", help="for --generate: the brokers to use")
    p.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS)
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
    if args.throttle is not None and (not args.execute or args.throttle < 0):
        raise PlanError("--throttle goes with --execute, as a number of bytes per second "
                        f"(got {args.throttle})" if args.execute else
                        "--throttle goes with --execute")
    if args.preserve_throttles and not args.verify:
        raise PlanError("--preserve-throttles goes with --verify")
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
        current, proposed = generate(bootstrap, _topics_to_move(args), _broker_list(args.broker_list))
        print("Current partition replica assignment")
        print(plan_json(current))
        print()
        print("Proposed partition reassignment configuration")
        print(plan_json(proposed))
        return 0
    if not args.reassignment_json_file:
        raise PlanError("--execute, --verify and --cancel need --reassignment-json-file")
    plan = read_plan(args.reassignment_json_file)
    if args.verify:
        done, in_progress, lines, live = verify(bootstrap, plan)
        print("Status of partition reassignment:")
        print("\n".join(lines))
        if not in_progress and not args.preserve_throttles:
            print("\n".join(clear_throttles(bootstrap, plan, live)))
        return 0 if done else 1
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
        if args.throttle is not None:
            print("Warning: You must run --verify periodically, until the reassignment "
                  "completes, to ensure the throttle is removed.")
            set_throttles(bootstrap, proposed_moves(plan, current, running), args.throttle)
            print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
        results = alter(bootstrap, dict(plan), timeout_ms=args.timeout_ms)
        started = [tp for tp, (code, _) in results.items() if not code]
        if started:
            print(f"Successfully started partition reassignments for {_names(started)}")
    else:
        running = ongoing(bootstrap, timeout_ms=args.timeout_ms)
        active = {tp: None for tp in plan if tp in running}
        if not active:
            print("None of the specified partition reassignments are active.")
            return 0
        results = alter(bootstrap, active, timeout_ms=args.timeout_ms)
        cancelled = [tp for tp, (code, _) in results.items() if not code]
        if cancelled:
            print(f"Successfully cancelled partition reassignments for: {_names(cancelled)}")
    refused = _refusals(results)
    for line in refused:
        print(f"logkeeper reassign-partitions: {line}", file=sys.stderr)
    return 1 if refused else 0


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
    except Busy as err:
        print(f"logkeeper reassign-partitions: {err}", file=sys.stderr)
        return 1
    except (ClientError, ValueError) as err:  # PlanError and ConfigError are ValueErrors
        print(f"logkeeper reassign-partitions: {err}", file=sys.stderr)
        return 2
