"""The `logkeeper` command line: one dispatcher, each subcommand owned by its module.

Every subcommand module exposes `main(argv: list[str]) -> int`; this file only maps
names to modules, imported lazily so `dump-log` works without the daemon's or Spark's
dependencies. Exit codes are the subcommand's own, except that output into a pipe
whose reader has gone (`logkeeper dump-log ... | head`) ends the command quietly with
141, the status of a process killed by SIGPIPE, as `cat` would.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

from daemon import version

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "dump-log": ("daemon.tools.dump_log", "print and verify Kafka log segments and indexes"),
    "serve": ("daemon.app", "run the storage daemon"),
    "log-dirs": ("daemon.tools.log_dirs",
                 "describe log dirs, move replicas between them, readmit, cordon or uncordon one"),
    "topics": ("daemon.tools.topics", "list, describe, create, alter or delete topics"),
    "configs": ("daemon.tools.configs", "describe or alter topic and broker configs"),
    "acls": ("daemon.tools.acls", "add, list or remove ACLs (kafka-acls.sh)"),
    "reassign-partitions": ("daemon.tools.reassign",
                            "move partitions' replicas between brokers (generate, execute, verify)"),
    "groups": ("daemon.tools.groups",
               "list, describe (lag), reset the offsets of or delete consumer groups"),
    "get-offsets": ("daemon.tools.get_offsets",
                    "each partition's offset at a time: log end, log start or a timestamp"),
    "delete-records": ("daemon.tools.delete_records",
                       "delete partitions' records below an offset"),
    "leader-election": ("daemon.tools.leader_election",
                        "elect partition leaders: back to the preferred replicas, or unclean"),
    "console-producer": ("daemon.tools.console_producer",
                         "write lines of standard input to a topic (kafka-console-producer.sh)"),
    "console-consumer": ("daemon.tools.console_consumer",
                         "print a topic's records (kafka-console-consumer.sh)"),
    "producer-perf-test": ("daemon.tools.producer_perf_test",
                           "send records and print throughput and latency "
                           "(kafka-producer-perf-test.sh)"),
    "consumer-perf-test": ("daemon.tools.consumer_perf_test",
                           "read records in a group and print throughput "
                           "(kafka-consumer-perf-test.sh)"),
    "e2e-latency": ("daemon.tools.e2e_latency",
                    "the time from sending a record to reading it back (kafka-e2e-latency.sh)"),
    "broker-api-versions": ("daemon.tools.broker_api_versions",
                            "the request versions every broker serves "
                            "(kafka-broker-api-versions.sh)"),
    "dev-cluster": ("daemon.tools.dev_cluster", "run a local ZooKeeper and N brokers"),
    "audit": ("spark_audit.main", "audit segment integrity across hosts with PySpark"),
}


def _usage() -> str:
    lines = ["usage: logkeeper COMMAND [ARGS...]", "       logkeeper --version", "",
             "commands:"]
    lines += [f"  {name:<19} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


# Kafka's scripts take the action as a flag (`kafka-topics.sh --list`, `kafka-consumer-groups.sh
# --describe --group G`); given so, it is taken as the subcommand, so an operator's habit
# works instead of failing on whatever word argparse then takes for the action.
KAFKA_ACTION_FLAGS: dict[str, tuple[str, ...]] = {
    "topics": ("list", "describe", "create", "alter", "delete"),
    "configs": ("describe", "alter"),
    "groups": ("list", "describe", "reset-offsets", "delete", "delete-offsets"),
    "log-dirs": ("describe",),
}


def kafka_action_flag(name: str, rest: list[str]) -> list[str]:
    """`rest` with Kafka's `--<action>` flag made the subcommand, when no subcommand is
    given first; otherwise `rest` as it is."""
    actions = KAFKA_ACTION_FLAGS.get(name, ())
    if not rest or rest[0] in actions:
        return rest
    flags = [i for i, arg in enumerate(rest) if arg.startswith("--") and arg[2:] in actions]
    if len(flags) != 1:  # none, or two actions at once: argparse says what is wrong
        return rest
    i = flags[0]
    return [rest[i][2:], *rest[:i], *rest[i + 1:]]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(f"logkeeper {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"logkeeper: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    rest = kafka_action_flag(name, rest)
    module = importlib.import_module(SUBCOMMANDS[name][0])
    try:
        code = int(module.main(rest) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit where it cannot be caught
    except BrokenPipeError:
        # The Python documentation's recipe (signal module, "Note on SIGPIPE"): point
        # stdout at /dev/null so the flush at interpreter exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
