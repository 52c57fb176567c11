"""Paired benchmarks: ours against a baseline, timed in the same run, reported as ratios.

Run: `make bench`, i.e. `python -m pytest benchmarks -q --benchmark-enable -p no:cacheprovider`
(pyproject's addopts skip benchmarks unless --benchmark-enable is given). At the end
of the session a table (name, ours, baseline, ratio, target) is printed and the pairs
are merged by name into benchmarks/results.json; `python benchmarks/report.py` prints
that file again.

Benchmark files are benchmarks/bench_*.py (collected by the hook below; the functions
in them are named test_*). API, for every benchmark file: request the `ratio` fixture and call

    ratio(name, ours_fn, baseline_fn, *, target=None, higher_is_better=True,
          setup=None, unit_bytes=0, baseline_label="", rounds=21, min_sample=0.002)

ours_fn and baseline_fn take no arguments and do one unit of work each (append one
batch, read one segment, ...). Both are timed interleaved (see report.py), the medians
give the ratio: baseline/ours when higher_is_better (speed-up, e.g. target=1.0 means
"at least as fast"), ours/baseline otherwise (relative cost, e.g. target=1.0 means "no
slower"). setup, if given, runs untimed before every timed batch of calls (for
example to truncate a file). unit_bytes adds GB/s to the table. The call returns the
report.Pair (None under --benchmark-disable, where both callables run once as a smoke
test). The first pair of a test is also handed to pytest-benchmark (`benchmark.pedantic`
on ours, the pair in extra_info), so --benchmark-json and --benchmark-compare keep
working. Targets are reported, never asserted: speed goals are not test failures.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import report  # this directory is on sys.path: pytest prepends a conftest's own dir

_PAIRS: list[report.Pair] = []
# Lines printed above the table (the machine, choices made at run time): `note` adds one.
_NOTES: list[str] = []

RatioFn = Callable[..., "report.Pair | None"]

# Where the page-cache figures keep their files: a tmpfs (LK_BENCH_DIR, else /dev/shm),
# so that neither side waits on the disk's writeback. On a disk-backed /tmp here the
# same Log.append baseline ran from 0.2 to 1.4 GB/s from one run to the next.
PAGE_CACHE_ROOT = os.environ.get("LK_BENCH_DIR") or (
    "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None)


# How much of the page cache the figures may use, written once and deleted before the
# first benchmark (see warm_page_cache): the figures' own files stay under it.
WARM_BYTES = 4 << 30
_WARM_CHUNK = 64 << 20


def warm_page_cache(root: str | None) -> str | None:
    """Write and delete up to WARM_BYTES under `root` once, before anything is timed: a
    line for the table, or None without a tmpfs. In a VM (Firecracker here) the host
    backs guest memory only when the guest first touches it, so on a fresh machine the
    first writes into the page cache ran at a quarter of the rate of later ones:
    `Log.append` into a tmpfs went from 1.8 to 0.3 GB/s within one run as it reached
    untouched memory, and a side timed later (a cluster's three copies against one
    baseline) paid for it more than the other. Written once, the memory the kernel hands
    the figures afterwards is backed, on either side."""
    if root is None:
        return None
    st = os.statvfs(root)
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) << 10 for line in f
                         if line.startswith("MemAvailable:"))
    size = min(WARM_BYTES, st.f_bavail * st.f_frsize // 2, available // 3)
    size -= size % _WARM_CHUNK
    if size <= 0:
        return None
    chunk = b"\1" * _WARM_CHUNK
    fd, path = tempfile.mkstemp(prefix="lk-bench-warm-", dir=root)
    started = time.perf_counter()
    try:
        for _ in range(size // _WARM_CHUNK):
            os.write(fd, chunk)
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        os.unlink(path)
    return (f"page cache warmed before timing: {size / (1 << 30):.1f} GiB written to {root} "
            f"and deleted, at {size / elapsed / 1e9:.2f} GB/s")


# This machine's kernel (a Firecracker guest's) hands freed memory back to the host
# once more than this many MiB of it wait to be reported (free page reporting): the
# guest then touches it anew, and the host backs it again, at ~0.4 GB/s. Left at its
# 1 GiB, the warm-up above was mostly handed back before the first figure, and a side
# that wrote more than 1 GiB past the other paid for it (a cluster's three copies of
# 64 MiB against one baseline: the baseline ran from 23 to 173 ms in one session, the
# catch-up ratio from 0.11x to 0.44x). Not Linux's own parameter: absent elsewhere.
HELD_FREE_MEMORY = Path("/sys/module/page_reporting/parameters/max_waiting_mib")


def hold_free_memory(param: Path = HELD_FREE_MEMORY) -> tuple[int | None, str] | None:
    """Raise the guest's held free memory to cover WARM_BYTES (twice over), for the
    bench's run: (the value to put back, None if it could not be raised; a line for the
    table), or None where the kernel has no such parameter or holds enough already."""
    try:
        before = int(param.read_text())
    except (OSError, ValueError):
        return None
    want = 2 * WARM_BYTES >> 20
    if before >= want:
        return None
    try:
        param.write_text(str(want))
    except OSError as err:
        return None, (f"free memory goes back to the host past {before} MiB "
                      f"({param}, could not raise it: {err.strerror}): figures after "
                      f"a side wrote more than that may pay the host's ~0.4 GB/s")
    return before, (f"free memory held by the guest raised from {before} to {want} MiB "
                    f"for the run ({param}; put back after), so the warm-up stays backed")


@pytest.fixture(scope="session", autouse=True)
def _page_cache_warmed(request: pytest.FixtureRequest) -> Iterator[None]:
    if not request.config.getoption("benchmark_enable", False):
        yield
        return
    restore, line = hold_free_memory() or (None, None)
    if line is not None:
        _NOTES.append(line)
    try:
        line = warm_page_cache(PAGE_CACHE_ROOT)
        if line is not None:
            _NOTES.append(line)
        yield
    finally:
        if restore is not None:
            HELD_FREE_MEMORY.write_text(str(restore))


def page_cache_dir(prefix: str) -> Iterator[Path]:
    """A fresh directory under PAGE_CACHE_ROOT (the system temp dir without one),
    removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=PAGE_CACHE_ROOT))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def page_cache_path() -> Iterator[Path]:
    """Like tmp_path, on a tmpfs when there is one (see PAGE_CACHE_ROOT)."""
    yield from page_cache_dir("lk-bench-")


@pytest.fixture(scope="module")
def page_cache_module_path() -> Iterator[Path]:
    """page_cache_path for a module-scoped fixture (a daemon shared by a file's tests)."""
    yield from page_cache_dir("lk-bench-module-")


@pytest.fixture
def ratio(benchmark: Any) -> RatioFn:
    handed_to_pytest_benchmark = False

    def run(name: str, ours: Callable[[], object], baseline: Callable[[], object], *,
            target: float | None = None, higher_is_better: bool = True,
            setup: Callable[[], object] | None = None, unit_bytes: int = 0,
            ours_label: str = "", baseline_label: str = "", rounds: int = 21,
            min_sample: float = 0.002) -> report.Pair | None:
        nonlocal handed_to_pytest_benchmark
        if benchmark.disabled:
            if setup is not None:
                setup()
            ours()
            baseline()
            return None
        ours_s, base_s, n_ours = report.measure_pair(
            ours, baseline, rounds=rounds, min_sample=min_sample, setup=setup)
        pair = report.Pair(name, ours_s, base_s, target, higher_is_better, ours_label,
                           baseline_label, unit_bytes)
        _PAIRS.append(pair)
        if not handed_to_pytest_benchmark:
            handed_to_pytest_benchmark = True
            benchmark.extra_info.update(pair.to_json())
            if setup is None:
                benchmark.pedantic(ours, rounds=5, iterations=n_ours)
            else:  # pytest-benchmark allows a setup only with one call per round
                benchmark.pedantic(ours, setup=setup, rounds=max(5, n_ours))
        return pair

    return run


@pytest.fixture
def measured() -> Callable[..., report.Pair]:
    """measured(name, ours_s, baseline_s, *, target=None, higher_is_better=True,
    unit_bytes=0, ours_label="", baseline_label=""): a pair whose two sides were timed by
    the benchmark itself (medians of whole runs that cannot be repeated in a tight loop,
    such as a cluster's catch-up), reported in the same table."""

    def add(name: str, ours_s: float, baseline_s: float, *, target: float | None = None,
            higher_is_better: bool = True, unit_bytes: int = 0, ours_label: str = "",
            baseline_label: str = "") -> report.Pair:
        pair = report.Pair(name, ours_s, baseline_s, target, higher_is_better, ours_label,
                           baseline_label, unit_bytes)
        _PAIRS.append(pair)
        return pair

    return add


@pytest.fixture
def note() -> Callable[[str], None]:
    """note(line): print line above the summary table, once however often it is added."""

    def add(line: str) -> None:
        if line not in _NOTES:
            _NOTES.append(line)

    return add


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # pyproject's addopts carry --benchmark-skip so the normal run skips benchmarks;
    # an explicit --benchmark-enable (make bench) means "run them", so lift the skip
    # before pytest-benchmark reads its options in its own pytest_configure.
    if config.getoption("benchmark_enable", False):
        config.option.benchmark_skip = False


def pytest_collect_file(file_path: Any, parent: Any) -> Any:
    # Benchmark files are named bench_*.py so the normal test run never collects them.
    # A file named on the command line is collected by pytest itself: not twice.
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") \
            and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _PAIRS and not _NOTES:
        return
    terminalreporter.write_sep("-", "ours vs baseline (same run; ratio > 1 = better "
                                    "for 'x faster', < 1 = better for 'x cost')")
    for line in _NOTES:
        terminalreporter.write_line(line)
    if not _PAIRS:  # figures only (medians, counts): no table
        return
    for line in report.render(_PAIRS).splitlines():
        terminalreporter.write_line(line)
    report.save(_PAIRS)
    terminalreporter.write_line(f"merged into {report.RESULTS}")
