"""A replica move between two log dirs (AlterReplicaLogDirs) against copying the same
partition's files, same run.

A standalone daemon with two dirs holds one partition of MOVE_BYTES in 64 KiB batches;
the partition is moved from one dir to the other and back (each move timed from the
request to the moment the destination holds `<topic>-0` and no copy is left, polled on
the filesystem every POLL_S), against `shutil.copytree` of the same partition dir.
Both sides write the same bytes to the page cache (the dirs are on a tmpfs when the
machine has one, conftest's PAGE_CACHE_ROOT); the move also reads every batch through
the log, appends it with its offsets kept, builds the indexes and switches over. No
target: the figure says what a move costs an operator against the floor of a copy.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.daemon_helpers import Daemon, RawClient  # noqa: E402
from tests.sick_helpers import create_topic, produce_raw  # noqa: E402

MOVE_BYTES = 128 << 20
PER_BATCH = 16  # 16 x 4 KiB values: ~64 KiB batches
POLL_S = 0.002
ROUNDS = 3


def _moved(dest: Path, src: Path, name: str) -> bool:
    return ((dest / name).is_dir() and not (src / name).exists()
            and not any(p.name.endswith(("-future", "-delete")) for p in dest.iterdir())
            and not any(p.name.endswith("-delete") for p in src.iterdir()))


def test_replica_move_vs_copying_the_files(measured: Any, benchmark: Any,
                                           page_cache_path: Path) -> None:
    if benchmark.disabled:
        pytest.skip("a figure, not a test: run with --benchmark-enable")
    a, b = page_cache_path / "a", page_cache_path / "b"
    d = Daemon(page_cache_path / "run", {"log.dirs": [str(a), str(b)],
                                         "log.segment.bytes": 64 << 20})
    d.log_dirs = [a, b]
    values = [bytes(range(256)) * 16] * PER_BATCH
    batches = MOVE_BYTES // (PER_BATCH * len(values[0]))
    with d:
        assert d.admin("log-dirs/cordon", b)[0] == 200
        create_topic(d, "moved", 1)
        assert d.admin("log-dirs/uncordon", b)[0] == 200
        c = RawClient(d.port)
        try:
            for _ in range(batches):
                assert produce_raw(c, "moved", 0, values)[0] == 0
        finally:
            c.close()
        admin = KafkaAdminClient(bootstrap_servers=d.bootstrap)
        moves, copies = [], []
        try:
            src, dest = a, b
            for _ in range(ROUNDS * 2):
                started = time.perf_counter()
                admin.alter_replica_log_dirs({("moved", 0, 1): str(dest)})
                while not _moved(dest, src, "moved-0"):
                    time.sleep(POLL_S)
                moves.append(time.perf_counter() - started)
                src, dest = dest, src
            for i in range(ROUNDS):
                started = time.perf_counter()
                shutil.copytree(src / "moved-0", page_cache_path / f"copy{i}")
                copies.append(time.perf_counter() - started)
                shutil.rmtree(page_cache_path / f"copy{i}")
        finally:
            admin.close()
        total = sum(f.stat().st_size for f in (src / "moved-0").glob("*.log"))
    measured("replica move between dirs vs copying its files", statistics.median(moves),
             statistics.median(copies), unit_bytes=total, ours_label="AlterReplicaLogDirs",
             baseline_label="shutil.copytree")
