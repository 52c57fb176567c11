"""A FUSE passthrough filesystem (mfusepy) with injectable latency and hangs, for fault tests.

`faulty_fuse()` mounts a passthrough of a fresh backing dir on a fresh temp dir, served
by a subprocess (`python -m tests.fusefs BACKING MOUNTPOINT`) so that a hung operation
blocks the caller of the syscall, never the test process's own threads, and libfuse's
signal handlers stay out of pytest. The test steers it with `FaultyFuse` methods sent
as lines on the server's stdin (each answered "ok"):

    delay SECONDS OPS NAME  ops listed in OPS (comma-separated, "*" for all) on files
                            named NAME ("*" for any) sleep SECONDS first; 0 clears
    hang                    every operation blocks until "release"
    release                 blocked operations go on, new ones are not blocked

Cleanup (on exit, even after a failure): release, lazy unmount (`fusermount3 -u -z`),
stop the server (SIGTERM, then SIGKILL), `umount -l` if the mount is somehow still
there, remove the temp dirs. Killing the server aborts the FUSE connection, so a
syscall still blocked on the mount fails (ENOTCONN) instead of hanging forever.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# ---- the server side (runs in the subprocess) ----


class _Faults:
    """What the stdin thread sets and every FUSE operation obeys."""

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.delay_ops: frozenset[str] = frozenset()
        self.delay_name = "*"
        self.released = threading.Event()
        self.released.set()

    def gate(self, op: str, path: str | None) -> None:
        while not self.released.wait(0.5):
            pass
        if self.delay_s > 0 and ("*" in self.delay_ops or op in self.delay_ops) and (
                self.delay_name == "*" or os.path.basename(path or "") == self.delay_name):
            time.sleep(self.delay_s)

    def command(self, line: str) -> str:
        words = line.split()
        if not words:
            return "error empty command"
        if words[0] == "delay" and len(words) == 4:
            self.delay_s = float(words[1])
            self.delay_ops = frozenset(words[2].split(","))
            self.delay_name = words[3]
        elif words[0] == "hang":
            self.released.clear()
        elif words[0] == "release":
            self.released.set()
        else:
            return f"error unknown command {line!r}"
        return "ok"


def _operations(backing: str, faults: _Faults) -> Any:
    import mfusepy

    def faulty(fn: Any) -> Any:
        name = fn.__name__

        def op(self: Any, path: str | None, *args: Any) -> Any:
            faults.gate(name, path)
            try:
                return fn(self, path, *args)
            except OSError as err:
                raise mfusepy.FuseOSError(err.errno or errno.EIO) from None

        op.__name__ = name
        return op

    def real(path: str | None) -> str:
        return backing + (path or "/")

    class Passthrough(mfusepy.Operations):
        use_ns = True

        @faulty
        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None else os.lstat(real(path))
            out = {k: getattr(st, k) for k in (
                "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks", "st_ino")}
            # use_ns: times in nanoseconds
            return out | {"st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns,
                          "st_ctime": st.st_ctime_ns}

        @faulty
        def access(self, path: str, amode: int) -> int:
            if not os.access(real(path), amode):
                raise OSError(errno.EACCES, "access")
            return 0

        @faulty
        def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
            # With use_ino every entry needs its inode: one of 0 is skipped by readers.
            out = []
            for name in (".", "..", *os.listdir(real(path))):
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(real(path), name))
                    out.append((name, {"st_mode": st.st_mode, "st_ino": st.st_ino}, 0))
            return out

        @faulty
        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(real(path), mode)
            return 0

        @faulty
        def rmdir(self, path: str) -> int:
            os.rmdir(real(path))
            return 0

        @faulty
        def unlink(self, path: str) -> int:
            os.unlink(real(path))
            return 0

        @faulty
        def rename(self, old: str, new: str) -> int:
            os.rename(real(old), real(new))
            return 0

        @faulty
        def link(self, target: str, source: str) -> int:
            os.link(real(source), real(target))
            return 0

        @faulty
        def symlink(self, target: str, source: str) -> int:
            os.symlink(source, real(target))
            return 0

        @faulty
        def readlink(self, path: str) -> str:
            return os.readlink(real(path))

        @faulty
        def chmod(self, path: str, mode: int) -> int:
            os.chmod(real(path), mode)
            return 0

        @faulty
        def chown(self, path: str, uid: int, gid: int) -> int:
            os.chown(real(path), uid, gid)
            return 0

        @faulty
        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            os.utime(real(path), ns=times) if times else os.utime(real(path))
            return 0

        @faulty
        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(real(path))
            return {k: getattr(sv, k) for k in (
                "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                "f_files", "f_flag", "f_frsize", "f_namemax")}

        @faulty
        def create(self, path: str, mode: int, fi: Any = None) -> int:
            return os.open(real(path), os.O_RDWR | os.O_CREAT, mode)

        @faulty
        def open(self, path: str, flags: int) -> int:
            return os.open(real(path), flags & ~(os.O_CREAT | os.O_EXCL))

        @faulty
        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        @faulty
        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            return os.pwrite(fh, data, offset)

        @faulty
        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            os.ftruncate(fh, length) if fh is not None else os.truncate(real(path), length)
            return 0

        @faulty
        def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
            if mode:
                raise OSError(errno.EOPNOTSUPP, "fallocate mode")
            os.posix_fallocate(fh, offset, size)
            return 0

        @faulty
        def flush(self, path: str, fh: int) -> int:
            return 0

        @faulty
        def fsync(self, path: str, datasync: int, fh: int) -> int:
            (os.fdatasync if datasync else os.fsync)(fh)
            return 0

        @faulty
        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

        @faulty
        def opendir(self, path: str) -> int:
            if not os.path.isdir(real(path)):
                raise OSError(errno.ENOTDIR, "opendir")
            return 0

        @faulty
        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            fd = os.open(real(path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            return 0

    return Passthrough()


def serve(backing: str, mountpoint: str) -> None:
    import mfusepy

    faults = _Faults()

    def control() -> None:
        for line in sys.stdin:
            print(faults.command(line), flush=True)
        faults.released.set()  # the test is gone: never leave an operation blocked

    threading.Thread(target=control, name="fusefs-control", daemon=True).start()
    mfusepy.FUSE(_operations(os.path.abspath(backing), faults), mountpoint, foreground=True,
                 fsname="lk-faulty", subtype="lkfaulty", use_ino=True)


# ---- the test side ----


def fuse_mounted(mountpoint: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            if fields[4] == str(mountpoint) and fstype.startswith("fuse"):
                return True
    return False


class FaultyFuse:
    def __init__(self, work: Path):
        self.work = work
        self.backing = work / "backing"
        self.path = work / "mnt"
        self.backing.mkdir()
        self.path.mkdir()
        self.log = work / "fusefs.stderr"
        self.proc: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 10.0) -> FaultyFuse:
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.fusefs", str(self.backing), str(self.path)],
                cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        deadline = time.monotonic() + timeout
        while not fuse_mounted(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the FUSE filesystem did not mount on {self.path}:\n"
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.02)
        return self

    def _command(self, line: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError(f"fusefs {line!r}: {answer or 'no answer'}")

    def delay(self, seconds: float, ops: tuple[str, ...] = ("*",), name: str = "*") -> None:
        """Operations in `ops` on files called `name` sleep `seconds` first (0: none)."""
        self._command(f"delay {seconds} {','.join(ops)} {name}")

    def hang(self) -> None:
        """Every operation blocks from now until `release()`."""
        self._command("hang")

    def release(self) -> None:
        self._command("release")

    def kill(self) -> None:
        """SIGKILL the server: the kernel aborts the connection, and every syscall still
        waiting on the mount fails (ENOTCONN). The way out when `release()` cannot be
        delivered; a process blocked on a FUSE request cannot even be killed until then."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(Exception):
                self.release()
        subprocess.run(["fusermount3", "-u", "-z", str(self.path)], capture_output=True)
        if proc is not None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if fuse_mounted(self.path):
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
        shutil.rmtree(self.work, ignore_errors=True)


@contextlib.contextmanager
def faulty_fuse(base: str | None = None) -> Iterator[FaultyFuse]:
    """A mounted FaultyFuse (healthy until told otherwise), cleaned up on exit."""
    from tests import faults

    faults.require_root()
    fs = FaultyFuse(Path(tempfile.mkdtemp(prefix="lk-fuse-", dir=base)))
    try:
        yield fs.start()
    finally:
        fs.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
