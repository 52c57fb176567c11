"""`broker.rack`: each broker registers its rack (Metadata shows it), and with every
broker's set, the controller spreads a new topic's replicas (and new partitions') across
the racks, as Kafka's rack-aware assignment does, so a rack that goes down takes at most
one replica of each partition; `reassign-partitions --generate` proposes the same unless
given `--disable-rack-aware`. Three real brokers: 1 and 2 in rack r1, 3 in rack r2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaAdminClient

from tests.cluster_helpers import Cluster, wait_for
from tests.daemon_helpers import REPO

RACKS = {1: "r1", 2: "r1", 3: "r2"}


def _on_both_racks(replicas: list[int] | tuple[int, ...]) -> bool:
    return {RACKS[b] for b in replicas} == {"r1", "r2"}


def test_replicas_are_spread_across_racks(tmp_path: Path) -> None:
    with Cluster(tmp_path, dirs=1, per_broker={b: {"broker.rack": r} for b, r in RACKS.items()}
                 ) as cl:
        ka = KafkaAdminClient(bootstrap_servers=cl.brokers[1].bootstrap)
        try:
            brokers = ka.describe_cluster()["brokers"]
        finally:
            ka.close()
        assert {b["broker_id"]: b["rack"] for b in brokers} == RACKS, brokers

        admin = AdminClient({"bootstrap.servers": cl.brokers[2].bootstrap})
        admin.create_topics([NewTopic("spread", 6, 2)])["spread"].result(30)
        meta = wait_for(lambda: cl.agreed("spread", 6), 30, "spread agreed")
        placed = {p: r[2] for (t, p), r in meta["partitions"].items() if t == "spread"}
        assert len(placed) == 6 and all(_on_both_racks(r) for r in placed.values()), placed
        # Leaders spread over the brokers too (the rack-alternated round robin).
        assert {r[0] for r in placed.values()} == {1, 2, 3}, placed

        admin.create_partitions([NewPartitions("spread", 9)])["spread"].result(30)
        meta = wait_for(lambda: cl.agreed("spread", 9), 30, "9 partitions agreed")
        added = {p: r[2] for (t, p), r in meta["partitions"].items() if t == "spread" and p >= 6}
        assert len(added) == 3 and all(_on_both_racks(r) for r in added.values()), added

        def generate(*extra: str) -> dict[int, list[int]]:
            proc = subprocess.run([sys.executable, "-m", "daemon.cli", "reassign-partitions",
                                   "--bootstrap-server", cl.brokers[3].bootstrap, "--generate",
                                   "--topics", "spread", "--broker-list", "1,2,3", *extra],
                                  cwd=REPO, capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stderr
            plan = json.loads(proc.stdout.strip().splitlines()[-1])
            return {p["partition"]: p["replicas"] for p in plan["partitions"]}

        for _ in range(5):  # the start and shift are random: several proposals
            proposed = generate()
            assert len(proposed) == 9 and all(_on_both_racks(r) for r in proposed.values())
        unaware = generate("--disable-rack-aware")
        assert len(unaware) == 9 and all(len(set(r)) == 2 for r in unaware.values())
