"""A fetch's record bytes held in pipes as references to page-cache pages, so they go
from a segment file to a client's socket without passing through Python (Kafka's
`FileRecords.writeTo`, its sendfile, split in two at a pipe).

Why two halves: every disk access of a log dir runs on that dir's worker, and a plain
sendfile from the event loop would read the file there (a page-cache miss on a hung disk
would stall every connection). So the dir worker splices the byte range a read computed
into pipes (`splice_range`): that reads the pages in, waiting on the disk if it must,
and leaves the pipes holding references to them. The event loop later splices each pipe
into the client's non-blocking socket (`SplicedRecords.send_to`, called from
daemon.api.connections), which moves page references and touches no disk.

What the pipes hold does not change when the segment goes away: retention deleting it,
or the fd closing, leaves the spliced pages in the pipes until they are sent. A
truncation (a follower cutting its diverged tail) zeroes the part of the page it cuts
through, as it does under Kafka's sendfile; only bytes past the new log end are touched,
and the receiver's CRC check refuses a batch that changed.

A range under SPLICE_MIN is read into bytes instead (a copy of a few KiB costs less
than the pipes). Pipes are a bounded resource (fs.pipe-max-size per pipe,
fs.pipe-user-pages-soft per user): each is grown to fs.pipe-max-size where allowed, a
range larger than one pipe takes several, and a range that would need more than
MAX_PIPES pipes, or a file system that cannot splice (EINVAL), has its rest read with
pread into bytes, sent the ordinary way. Drained pipes go back to a small pool
(POOL_SIZE) shared by every thread.

Errors: `splice_range` raises the OSError of the read (its caller runs it inside the log
dir's IoGuard, which classifies it); `send_to` raises BlockingIOError when the socket is
full (wait until it is writable and call again) and the socket's own errors otherwise.
`close` is idempotent; a SplicedRecords nobody sends or closes closes its pipes when it is
collected. A SplicedRecords is used by one thread at a time: filled on a worker, then
sent or closed on the event loop.
"""

from __future__ import annotations

import collections
import fcntl
import os
import weakref

import native

MAX_PIPES = 64  # pipes per range; past that the rest is read into bytes
# A range under this is read into bytes: for a few KiB (a consumer of many partitions,
# each a few records behind), a pipe's two splices and the answer's part of its own
# cost more than the copy, which the answer's encoder then writes inline.
SPLICE_MIN = 16 << 10
POOL_SIZE = 16  # idle pipes kept for reuse
_SPLICE_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def _pipe_max_size(procfs: str = "/proc") -> int:
    try:
        with open(f"{procfs}/sys/fs/pipe-max-size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20


PIPE_SIZE = _pipe_max_size()
_pool: collections.deque[tuple[int, int]] = collections.deque()  # (read fd, write fd)


def _new_pipe() -> tuple[int, int]:
    r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        fcntl.fcntl(w, _F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass  # over the user's pipe pages: a default-sized pipe still works, in more pipes
    return r, w


def _take_pipe() -> tuple[int, int]:
    try:
        return _pool.pop()
    except IndexError:
        return _new_pipe()


def _give_back(pipe: tuple[int, int]) -> None:
    if len(_pool) < POOL_SIZE:
        _pool.append(pipe)
    else:
        _close_pipe(pipe)


def _close_pipe(pipe: tuple[int, int]) -> None:
    for fd in pipe:
        try:
            os.close(fd)
        except OSError:
            pass


def _close_all(pipes: list[list[int]]) -> None:
    for r, w, _ in pipes:
        _close_pipe((r, w))
    pipes.clear()


class SplicedRecords:
    """Record bytes in pipes (and, past what pipes could take, in bytes), in order.

    `len()` is the size of the whole range; `parts` are [read fd, write fd, bytes still
    in it] lists and bytes objects, sent in order by `send_to` or read by `to_bytes`."""

    __slots__ = ("size", "parts", "_pipes", "_finalizer", "__weakref__")

    def __init__(self) -> None:
        self.size = 0
        self.parts: list[list[int] | bytes] = []
        self._pipes: list[list[int]] = []
        self._finalizer = weakref.finalize(self, _close_all, self._pipes)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"SplicedRecords({self.size} bytes in {len(self._pipes)} pipes)"

    # ---- filling (a dir worker) ----

    def _splice_in(self, fd: int, position: int, size: int) -> int:
        """Splice up to `size` bytes from `fd` at `position` into pipes; bytes spliced
        (fewer at the end of the file, or when MAX_PIPES pipes are full)."""
        done = 0
        pipe: list[int] | None = None  # the pipe being filled; None: take another
        while done < size:
            if pipe is None:
                if len(self._pipes) == MAX_PIPES:
                    break
                r, w = _take_pipe()
                pipe = [r, w, 0]
                self._pipes.append(pipe)
                self.parts.append(pipe)
            try:
                n = os.splice(fd, pipe[1], size - done, offset_src=position + done,
                              flags=_SPLICE_FLAGS)
            except BlockingIOError:  # this pipe is full
                if pipe[2] == 0:  # not even a page fits: more pipes will not help
                    self._drop_last_pipe()
                    break
                pipe = None
                continue
            except InterruptedError:
                continue
            if n == 0:
                break  # end of file
            pipe[2] += n
            done += n
        return done

    def _drop_last_pipe(self) -> None:
        pipe = self._pipes.pop()
        self.parts.pop()
        _give_back((pipe[0], pipe[1]))

    # ---- sending (the event loop) ----

    def send_to(self, sock_fd: int) -> int:
        """Splice what is left into the non-blocking socket `sock_fd` until it is all sent
        (returns 0) or the socket is full (raises BlockingIOError: call again once it is
        writable). Sent parts leave `parts`; drained pipes go back to the pool."""
        parts = self.parts
        while parts:
            part = parts[0]
            if isinstance(part, bytes):
                n = os.write(sock_fd, part)
                if n < len(part):
                    parts[0] = part[n:]
                    raise BlockingIOError
                parts.pop(0)
                continue
            while part[2] > 0:
                try:
                    n = os.splice(part[0], sock_fd, part[2], flags=_SPLICE_FLAGS)
                except InterruptedError:
                    continue
                if n == 0:
                    raise BrokenPipeError(f"{self}: the pipe ran dry with {part[2]} bytes "
                                          "still to send")
                part[2] -= n
            parts.pop(0)
            self._pipes.remove(part)
            _give_back((part[0], part[1]))
        return 0

    def to_bytes(self) -> bytes:
        """The whole content as one bytes object, draining the pipes (reads memory only):
        for a connection that cannot splice."""
        out = []
        for part in self.parts:
            if isinstance(part, bytes):
                out.append(part)
                continue
            while part[2] > 0:
                chunk = os.read(part[0], part[2])
                if not chunk:
                    raise BrokenPipeError(f"{self}: the pipe ran dry")
                out.append(chunk)
                part[2] -= len(chunk)
        self.parts.clear()
        for pipe in self._pipes:
            _give_back((pipe[0], pipe[1]))
        self._pipes.clear()
        return b"".join(out)

    def close(self) -> None:
        """Drop the bytes not sent: their pipes are closed (not reused: they hold data)."""
        self.parts.clear()
        self._finalizer()


def splice_range(fd: int, position: int, size: int, path: str | None = None
                 ) -> SplicedRecords | bytes:
    """The `size` bytes of `fd` from `position` as SplicedRecords, or as bytes when
    under SPLICE_MIN. Runs on the dir worker (it reads the file); OSError as from a
    read, the pipes closed first."""
    if size < SPLICE_MIN:
        return native.pread(fd, size, position, path=path)
    out = SplicedRecords()
    try:
        try:
            done = out._splice_in(fd, position, size)
        except OSError as err:
            if err.errno not in (22, 95):  # EINVAL, EOPNOTSUPP: this file cannot splice
                raise
            done = sum(p[2] for p in out._pipes)
        if done < size:
            rest = native.pread(fd, size - done, position + done, path=path)
            if rest:
                out.parts.append(rest)
            done += len(rest)
        out.size = done  # short only if the file is (a bug elsewhere): whole batches or less
        return out
    except BaseException:
        out.close()
        raise
