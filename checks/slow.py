"""Slow-disk detection: a log dir whose latency stands out from the host's other dirs.

Kafka has nothing for this. Each dir's availability-probe latencies (and, where the
device is known, psutil's per-device IO times) feed a `SlowDiskDetector`, which
compares each dir's recent median with the median of the other dirs on the host. A dir
that is an outlier for `persistence` evaluations in a row is DEGRADED; it stops being
one as soon as an evaluation finds it normal. The detector is pure computation over
the numbers it is given: thread-safe for one feeding thread.
"""

from __future__ import annotations

import os
import statistics
from collections import deque
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class DiskLatency:
    log_dir: str
    median_ms: float
    peers_median_ms: float
    outlier: bool
    degraded: bool


class SlowDiskDetector:
    def __init__(self, *, window: int = 20, factor: float = 5.0, min_ms: float = 50.0,
                 persistence: int = 3):
        self.window = window
        self.factor = factor
        self.min_ms = min_ms  # below this nothing is "slow", however the peers compare
        self.persistence = persistence
        self._samples: dict[str, deque[float]] = {}
        self._streak: dict[str, int] = {}

    def record(self, log_dir: str, latency_ms: float) -> None:
        self._samples.setdefault(log_dir, deque(maxlen=self.window)).append(latency_ms)

    def forget(self, log_dir: str) -> None:
        self._samples.pop(log_dir, None)
        self._streak.pop(log_dir, None)

    def evaluate(self) -> dict[str, DiskLatency]:
        medians = {d: statistics.median(s) for d, s in self._samples.items() if s}
        out = {}
        for d, med in medians.items():
            peers = [m for other, m in medians.items() if other != d]
            peer_med = statistics.median(peers) if peers else med
            outlier = bool(peers) and med >= self.min_ms and med > self.factor * max(peer_med, 1e-3)
            self._streak[d] = self._streak.get(d, 0) + 1 if outlier else 0
            out[d] = DiskLatency(d, med, peer_med, outlier, self._streak[d] >= self.persistence)
        return out


def device_for_path(path: str | os.PathLike[str], *, sysfs: str = "/sys") -> str | None:
    """The block device name (as psutil names it, e.g. "sda1", "loop3") holding path."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    link = os.path.join(sysfs, "dev", "block", f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    try:
        return os.path.basename(os.path.realpath(link)) if os.path.exists(link) else None
    except OSError:
        return None


def device_io_latency_ms(before: dict, after: dict, device: str) -> float | None:
    """Mean ms per completed IO on `device` between two psutil.disk_io_counters(perdisk=True)."""
    a, b = before.get(device), after.get(device)
    if a is None or b is None:
        return None
    ios = (b.read_count - a.read_count) + (b.write_count - a.write_count)
    if ios <= 0:
        return None
    return ((b.read_time - a.read_time) + (b.write_time - a.write_time)) / ios


def io_counters() -> dict:
    try:
        return psutil.disk_io_counters(perdisk=True) or {}
    except (OSError, RuntimeError):
        return {}
