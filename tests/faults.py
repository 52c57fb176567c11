"""Real kernel faults for tests: small tmpfs mounts, loop-mounted ext4, FS shutdown.

Each helper is a context manager that unmounts and detaches what it made even when the
test body fails. They need root; `require_root()` skips outside CI and fails inside it
(CI runs as root, so a real-fault test never silently skips there).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# _IOR('X', 125, __u32): ext4's FS_IOC_SHUTDOWN (also XFS_IOC_GOINGDOWN).
FS_IOC_SHUTDOWN = 0x8004587D
SHUTDOWN_NOLOGFLUSH = 2


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_root() -> None:
    if os.geteuid() != 0:
        if in_ci():
            pytest.fail("real-fault tests need root, and CI runs as root")
        pytest.skip("real-fault tests need root (mounts); CI runs them as root")


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def tmpfs(size: str = "4m", *, base: str | None = None) -> Iterator[Path]:
    """A fresh tmpfs of `size` (ENOSPC when full), unmounted on exit."""
    require_root()
    mnt = Path(tempfile.mkdtemp(prefix="lk-tmpfs-", dir=base))
    _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(mnt))
    try:
        yield mnt
    finally:
        _umount(mnt)
        with contextlib.suppress(OSError):
            mnt.rmdir()


@contextlib.contextmanager
def loop_ext4(size_mb: int = 32, *, base: str | None = None) -> Iterator[Path]:
    """A loop-mounted ext4 image; `shutdown(path)` makes every later IO on it EIO."""
    require_root()
    work = Path(tempfile.mkdtemp(prefix="lk-loop-", dir=base))
    image = work / "disk.img"
    mnt = work / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(size_mb * 1024 * 1024)
    _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image))
    _run("mount", "-o", "loop", str(image), str(mnt))
    try:
        yield mnt
    finally:
        _umount(mnt)
        with contextlib.suppress(OSError):
            image.unlink()
        with contextlib.suppress(OSError):
            mnt.rmdir()
            work.rmdir()


def sync_fs(path: Path) -> None:
    """syncfs(2) on the filesystem holding `path`: its dirty data on its disk, and only
    its. os.sync() flushes every filesystem, and after a long test run the backing
    files' writeback can stall every loop device past a probe timeout at once."""
    import ctypes

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
    finally:
        os.close(fd)


def shutdown_fs(path: Path) -> None:
    """FS_IOC_SHUTDOWN on the filesystem holding `path`: it answers EIO from now on."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, FS_IOC_SHUTDOWN, SHUTDOWN_NOLOGFLUSH.to_bytes(4, "little"))
    finally:
        os.close(fd)
