"""Availability and space probes of one log dir, as results.

`probe_availability` writes, syncs and reads back a canary block through the native
fast path; `probe_space` reads fstatvfs numbers and compares them with the dir's
low-space floor and resume mark. Both catch the OSError of a sick disk and return it
in the result. They block on the disk: the daemon runs them on the dir's own worker
with a timeout, so a hung disk stalls only its own probe.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import native


@dataclass(frozen=True)
class AvailabilityResult:
    path: str
    ok: bool
    latency_ns: int
    errno: int | None = None
    error: str = ""


@dataclass(frozen=True)
class SpaceResult:
    path: str
    ok: bool  # the probe itself worked
    total_bytes: int = 0
    avail_bytes: int = 0
    free_inodes: int = 0
    below_floor: bool = False  # saturate: under the floor, or out of inodes
    above_resume: bool = False  # a saturated dir may come back online
    errno: int | None = None
    error: str = ""


def dir_identity(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(device, inode) of a dir: what `probe_availability(expect=...)` compares with."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def mount_point(path: str | os.PathLike[str]) -> str:
    """The mount point of the filesystem `path` lies on (of its nearest existing
    ancestor when `path` itself does not exist)."""
    where = os.path.abspath(path)
    while not os.path.exists(where):
        where = os.path.dirname(where)
    while not os.path.ismount(where):
        where = os.path.dirname(where)
    return where


def probe_availability(path: str | os.PathLike[str], *, block_size: int = 4096,
                       expect: tuple[int, int] | None = None) -> AvailabilityResult:
    """Canary write, sync and read-back. With `expect` (the dir's `dir_identity` when it
    was opened), a path that now names another directory fails: after a lazy unmount or
    a rename the canary would otherwise land on whatever is there now."""
    where = os.fspath(path)
    if expect is not None:
        try:
            now = dir_identity(where)
        except OSError as err:
            return AvailabilityResult(where, False, 0, err.errno, f"{err.strerror}: {where}")
        if now != expect:
            return AvailabilityResult(
                where, False, 0, None,
                f"{where} is no longer the directory that was opened (unmounted, moved "
                f"or replaced: device:inode {expect[0]}:{expect[1]} -> {now[0]}:{now[1]})")
    try:
        latency = native.availability_probe(where, block_size)
    except OSError as err:
        return AvailabilityResult(where, False, 0, err.errno, f"{err.strerror}: {where}")
    return AvailabilityResult(where, True, latency)


def probe_space(path: str | os.PathLike[str], *, floor_bytes: int = 0,
                resume_bytes: int = 0) -> SpaceResult:
    """Free space of the dir against its floor (saturate below) and resume mark."""
    where = os.fspath(path)
    try:
        space = native.space_probe(where)
    except OSError as err:
        return SpaceResult(where, False, errno=err.errno, error=f"{err.strerror}: {where}")
    no_inodes = space.total_inodes > 0 and space.free_inodes == 0
    return SpaceResult(
        where, True, space.total_bytes, space.avail_bytes, space.free_inodes,
        below_floor=space.avail_bytes < floor_bytes or no_inodes,
        above_resume=space.avail_bytes >= resume_bytes and not no_inodes,
    )
