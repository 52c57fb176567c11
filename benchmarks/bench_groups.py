"""Consumer-group figures (issue "What every Kafka client expects", section 5), on a
standalone daemon with real clients:

- Rebalance time when one member of a 2-member confluent-kafka group leaves: from its
  close() (LeaveGroup) to the other member holding both partitions; median and p99 over
  RUNS runs (`LK_GROUP_RUNS`, default 20). Heartbeats every 100 ms, so the figure is
  mostly the coordinator's and not the client's heartbeat wait.
- Offset commit round trip: one OffsetCommit at a time on one connection (median,
  p99), against a Produce (acks=1, one small record) round trip timed on the same
  connection in the same run; commits per second from that one client.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import ProduceRequest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from logstore.records import build_batch  # noqa: E402
from tests.daemon_helpers import Daemon, RawClient  # noqa: E402
from tests.test_groups import GROUP_KEYS, create_topic, wait_for  # noqa: E402

RUNS = int(os.environ.get("LK_GROUP_RUNS", "20"))
COMMITS = int(os.environ.get("LK_GROUP_COMMITS", "2000"))


def p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]


def test_rebalance_when_one_of_two_members_leaves(note: Any, benchmark: Any) -> None:
    if benchmark.disabled:
        pytest.skip("a figure, not a test: run with --benchmark-enable")
    times = []
    with tempfile.TemporaryDirectory(prefix="lk-bench-groups-") as tmp, \
            Daemon(Path(tmp) / "b", GROUP_KEYS, dirs=1) as d:
        create_topic(d.bootstrap, "t", 2)
        for run in range(RUNS):
            conf = {"bootstrap.servers": d.bootstrap, "group.id": f"g{run}",
                    "session.timeout.ms": 6000, "heartbeat.interval.ms": 100}
            a, b = ck.Consumer(conf), ck.Consumer(conf)
            a.subscribe(["t"])
            b.subscribe(["t"])

            def split(a: Any = a, b: Any = b) -> bool:
                a.poll(0.02)
                b.poll(0.02)
                return len(a.assignment()) == 1 and len(b.assignment()) == 1
            wait_for(split, 60, "one partition each")
            started = time.monotonic()
            b.close()
            while len(a.assignment()) != 2:
                a.poll(0.005)
            times.append(time.monotonic() - started)
            a.close()
    note(f"rebalance after one of 2 confluent members leaves ({RUNS} runs): median "
         f"{statistics.median(times) * 1000:.0f} ms, p99 {p99(times) * 1000:.0f} ms "
         "(heartbeat.interval.ms 100)")
    benchmark.extra_info["rebalance_s"] = times


def test_offset_commit_round_trip(note: Any, measured: Any, benchmark: Any) -> None:
    if benchmark.disabled:
        pytest.skip("a figure, not a test: run with --benchmark-enable")
    with tempfile.TemporaryDirectory(prefix="lk-bench-groups-") as tmp, \
            Daemon(Path(tmp) / "b", GROUP_KEYS, dirs=1) as d:
        create_topic(d.bootstrap, "t", 1)
        c = RawClient(d.port)
        try:
            find = FindCoordinatorRequest[1](key="g", key_type=0)
            wait_for(lambda: c.request(find, 1).error_code == 0, 30, "a coordinator")
            T = OffsetCommitRequest[8].OffsetCommitRequestTopic

            def commit(offset: int) -> Any:
                return OffsetCommitRequest[8](
                    group_id="g", generation_id_or_member_epoch=-1, member_id="",
                    group_instance_id=None, topics=[T(name="t", partitions=[
                        T.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                       committed_leader_epoch=-1,
                                                       committed_metadata="")])])
            PT = ProduceRequest[8].TopicProduceData
            batch = build_batch([(b"k", b"v" * 40)])

            def produce() -> Any:
                return ProduceRequest[8](transactional_id=None, acks=1, timeout_ms=5000,
                                         topic_data=[PT(name="t", partition_data=[
                                             PT.PartitionProduceData(index=0, records=batch)])])
            wait_for(lambda: c.request(commit(0), 8).topics[0].partitions[0].error_code == 0,
                     30, "the first commit")
            commits, produces = [], []
            for i in range(COMMITS):
                t0 = time.perf_counter()
                r = c.request(commit(i), 8)
                t1 = time.perf_counter()
                assert r.topics[0].partitions[0].error_code == 0
                p = c.request(produce(), 8)
                t2 = time.perf_counter()
                assert p.responses[0].partition_responses[0].error_code == 0
                commits.append(t1 - t0)
                produces.append(t2 - t1)
        finally:
            c.close()
    measured("OffsetCommit round trip vs Produce acks=1 (median)",
             statistics.median(commits), statistics.median(produces),
             higher_is_better=False, ours_label="OffsetCommit", baseline_label="Produce acks=1")
    note(f"OffsetCommit round trip ({COMMITS} in a row, one connection): median "
         f"{statistics.median(commits) * 1e6:.0f} us, p99 {p99(commits) * 1e6:.0f} us, "
         f"{len(commits) / sum(commits):.0f} commits/s from one client; Produce acks=1 of one "
         f"record on the same connection: median {statistics.median(produces) * 1e6:.0f} us")
    benchmark.extra_info.update({"commit_s": commits, "produce_s": produces})
