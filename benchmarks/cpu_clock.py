"""CPU time another process (a broker under measurement) has used, to the nanosecond.

psutil's cpu_times() and threads() read /proc's clock ticks: 10 ms steps. Over a handful
of requests a step is most of the figure (9 Fetches of 1 MiB that cost 10 ms read as
1.11 ms each, and as 0 or 2.22 ms in the next run), so the benchmarks that divide a
broker's CPU time by requests read the kernel's own nanosecond clocks instead:

- a process: its CPU-time clock (clock_gettime on the clock id the kernel derives from
  the pid, what clock_getcpuclockid(3) returns: every thread's user and system time,
  those that ended included);
- one thread: the on-CPU nanoseconds of /proc/<pid>/task/<tid>/schedstat (the kernel
  does not let one process read another's thread clock).

Where neither can be read (another user's process, no schedstat), psutil's figures are
used, with their 10 ms steps.
"""

from __future__ import annotations

import time

import psutil

_CPUCLOCK_SCHED = 2  # the kernel's clock id layout: (~pid << 3) | CPUCLOCK_SCHED


def process_cpu_s(pid: int) -> float:
    """Seconds of CPU the process `pid` has used, all its threads, user and system."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | _CPUCLOCK_SCHED) / 1e9
    except OSError:
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system


def thread_cpu_s(pid: int, tid: int) -> float:
    """Seconds of CPU thread `tid` of process `pid` has used (its main thread: tid=pid)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        t = next(t for t in psutil.Process(pid).threads() if t.id == tid)
        return t.user_time + t.system_time
