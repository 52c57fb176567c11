"""Kafka's LogFlushStats (`kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs`):
how many segment flushes (fdatasync of a segment's `.log` and its indexes) ran and how
long each took, over every log of this process, as Kafka's JVM-wide timer counts them.

Segments record (`observe`) from their log dirs' worker threads; the daemon's metrics
read `snapshot()` at scrape time. Recording never raises; a flush that failed is
counted too, as Kafka's timer counts it.
"""

from __future__ import annotations

import bisect
import threading

# Upper bounds, in seconds, of the histogram's buckets (the last one is +Inf).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
           10.0, 30.0)

_lock = threading.Lock()
_counts = [0] * (len(BUCKETS) + 1)
_sum = 0.0


def observe(seconds: float) -> None:
    """One segment flush took `seconds`. Thread-safe."""
    global _sum
    i = bisect.bisect_left(BUCKETS, seconds)
    with _lock:
        _counts[i] += 1
        _sum += seconds


def snapshot() -> tuple[list[int], float]:
    """(flushes per bucket, the last one past every bound; total seconds). Thread-safe."""
    with _lock:
        return list(_counts), _sum
