"""`logkeeper leader-election`: what Kafka's `kafka-leader-election.sh` does, through the
Kafka protocol.

    logkeeper leader-election --election-type preferred|unclean
        (--topic T --partition P | --all-topic-partitions | --path-to-json-file FILE)

What an operator runs once a broker (or a disk of it) is back: its partitions stay led
by the replicas that took over until an election moves them back. PREFERRED makes each
partition's preferred replica (the first of its assignment) its leader again when it is
alive and in the ISR; UNCLEAN elects a leader for a partition that has none, from its
live replicas even out of the ISR (records only the old leader held are lost). The
active controller does it (ElectLeaders, found through Metadata and asked again if it
moves meanwhile), and answers once the brokers know the new leaders.

FILE is Kafka's: `{"partitions": [{"topic": "t", "partition": 0}, ...]}`. With
`--all-topic-partitions` every partition that needs the election gets it.

Prints Kafka's lines: "Successfully completed leader election (PREFERRED) for
partitions t-0, t-1", "Valid replica already elected for partitions t-2" (nothing to
do), and per partition that could not be elected "Error completing leader election
(PREFERRED) for partition: t-3: <error>" (no replica eligible, unknown partition...).

The broker asked first is `--bootstrap-server`, else the listener of the daemon on this
host (`--config FILE`, or the embedded defaults).

Exit codes: 0 each partition elected or already led by a valid replica; 1 some
partition could not be elected (each named), or the controller did not answer in time;
2 a usage error, a bad file or config file, or no broker reachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

from ..api import errors
from .client import (
    Connection,
    Refused,
    add_broker_options,
    at_controller,
    bootstrap_of,
    read_json_option,
    run_tool,
)
from .leaders import TP, error_text

ELECTIONS = {"preferred": 0, "unclean": 1}
TIMEOUT_MS = 30000  # Kafka's tool waits as long
FORMAT = '{"partitions": [{"topic": "foo", "partition": 1}, {"topic": "foobar", "partition": 2}]}'


def parse_election_file(doc: Any, where: str = "--path-to-json-file") -> list[TP]:
    """Kafka's replica election JSON (parsed): its partitions; ValueError naming what is
    wrong."""
    if not doc:
        raise ValueError(f"{where}: Replica election data is empty")
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise ValueError(f'{where}: Replica election data is missing "partitions" field; '
                         f"the format is {FORMAT}")
    out: list[TP] = []
    for i, entry in enumerate(doc["partitions"]):
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str)
                and isinstance(entry.get("partition"), int)
                and not isinstance(entry.get("partition"), bool) and entry["partition"] >= 0):
            raise ValueError(f"{where}: partitions[{i}] is {json.dumps(entry)}, not "
                             '{"topic": string, "partition": int >= 0}')
        out.append((entry["topic"], entry["partition"]))
    duplicates = sorted({f"{t}-{p}" for t, p in out if out.count((t, p)) > 1})
    if duplicates:
        raise ValueError(f"Replica election data contains duplicate partitions: "
                         f"{','.join(duplicates)}")
    if not out:
        raise ValueError(f"{where}: Replica election data is empty")
    return out


def elect(bootstrap: str, election: int, partitions: list[TP] | None,
          timeout_ms: int = TIMEOUT_MS) -> dict[TP, tuple[int, str | None]]:
    """Each partition's (error code, message) as the controller answers the election
    (0: elected); `partitions` None asks for every partition that needs one."""
    R = ElectLeadersRequest.TopicPartitions
    wanted = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        wanted = [R(topic=t, partitions=ps) for t, ps in by_topic.items()]

    def send(conn: Connection) -> tuple[int, Any]:
        resp = conn.call(ElectLeadersRequest(election_type=election, topic_partitions=wanted,
                                             timeout_ms=timeout_ms),
                         ElectLeadersResponse, lo=1 if election else 0, hi=2)
        codes = {p.error_code for r in resp.replica_election_results for p in r.partition_result}
        top = getattr(resp, "error_code", errors.NONE)
        return (errors.NOT_CONTROLLER if errors.NOT_CONTROLLER in codes | {top} else top), resp

    top, resp = at_controller(bootstrap, timeout_ms, send)
    if top:
        raise Refused(top, "the controller refused the election")
    return {(r.topic, p.partition_id): (p.error_code, p.error_message)
            for r in resp.replica_election_results for p in r.partition_result}


def render(election: int, results: dict[TP, tuple[int, str | None]]) -> list[str]:
    """Kafka's tool's lines for these results."""
    name = "PREFERRED" if election == 0 else "UNCLEAN"
    done = sorted(tp for tp, (code, _) in results.items() if code == errors.NONE)
    noop = sorted(tp for tp, (code, _) in results.items() if code == errors.ELECTION_NOT_NEEDED)
    failed = sorted(tp for tp, (code, _) in results.items()
                    if code not in (errors.NONE, errors.ELECTION_NOT_NEEDED))
    lines = []
    if done:
        lines.append(f"Successfully completed leader election ({name}) for partitions "
                     f"{', '.join(f'{t}-{p}' for t, p in done)}")
    if noop:
        lines.append("Valid replica already elected for partitions "
                     f"{', '.join(f'{t}-{p}' for t, p in noop)}")
    lines += [f"Error completing leader election ({name}) for partition: {t}-{p}: "
              f"{error_text(*results[(t, p)])}" for t, p in failed]
    return lines


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="logkeeper leader-election",
        description="Elect partition leaders (preferred or unclean), as Kafka's "
                    "kafka-leader-election.sh.")
    add_broker_options(p)
    p.add_argument("--election-type", required=True, type=str.lower, choices=sorted(ELECTIONS),
                   help="preferred: back to each partition's first replica; unclean: a "
                        "leader for a leaderless partition, even from outside the ISR")
    p.add_argument("--topic", help="the topic of --partition")
    p.add_argument("--partition", type=int, help="the partition of --topic")
    p.add_argument("--all-topic-partitions", action="store_true",
                   help="every partition that needs the election")
    p.add_argument("--path-to-json-file", metavar="FILE",
                   help=f"the partitions, in Kafka's format: {FORMAT}")
    return p


def _partitions(args: argparse.Namespace) -> list[TP] | None:
    """The partitions asked for (None: all); ValueError for a bad combination."""
    given = [name for name, on in (("--topic", args.topic is not None),
                                   ("--all-topic-partitions", args.all_topic_partitions),
                                   ("--path-to-json-file", args.path_to_json_file is not None))
             if on]
    if len(given) != 1:
        both = "" if not given else ", not " + " and ".join(given)
        raise ValueError("one of --topic (with --partition), --all-topic-partitions or "
                         f"--path-to-json-file is required{both}")
    if args.partition is not None and args.topic is None:
        raise ValueError("--partition needs --topic")
    if args.topic is not None:
        if args.partition is None or args.partition < 0:
            raise ValueError("--topic needs --partition (a partition id, 0 or more)")
        return [(args.topic, args.partition)]
    if args.all_topic_partitions:
        return None
    return parse_election_file(read_json_option("--path-to-json-file", args.path_to_json_file,
                                                FORMAT))


def _run(args: argparse.Namespace) -> int:
    election = ELECTIONS[args.election_type]
    results = elect(bootstrap_of(args), election, _partitions(args))
    lines = render(election, results)
    if lines:
        print("\n".join(lines))
    if any(code == errors.REQUEST_TIMED_OUT for code, _ in results.values()):
        print("Timeout waiting for election results", file=sys.stderr)
    return 1 if any(code not in (errors.NONE, errors.ELECTION_NOT_NEEDED)
                    for code, _ in results.values()) else 0


def main(argv: list[str]) -> int:
    return run_tool("leader-election", _parser(), argv, _run)
