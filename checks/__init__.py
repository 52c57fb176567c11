"""Disk health checks for log dirs. They report; they never decide a dir's state.

Each check takes its roots as arguments (a path, `sysfs="/sys"`, `procfs="/proc"`) and
returns a small frozen result; an unhealthy disk is a result, never an exception.
"""

from .probes import (
    AvailabilityResult,
    SpaceResult,
    dir_identity,
    mount_point,
    probe_availability,
    probe_space,
)
from .slow import DiskLatency, SlowDiskDetector, device_for_path, device_io_latency_ms
from .watch import LogDirWatcher, WatchEvent

__all__ = [
    "AvailabilityResult", "DiskLatency", "LogDirWatcher", "SlowDiskDetector", "SpaceResult",
    "WatchEvent", "device_for_path", "device_io_latency_ms", "dir_identity", "mount_point",
    "probe_availability", "probe_space",
]
