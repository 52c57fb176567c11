"""`logkeeper serve`: the storage daemon's process, event loop, listener and lifecycle.

Start-up: read the config (a bad one exits 2 naming the key), start /metrics and
/healthz, open every log dir on its own worker (recovering logs that were not closed
cleanly), start the Kafka listener, then tell systemd READY=1. While running, the main
loop pings the systemd watchdog and runs retention and flush/checkpoint rounds on the
workers. SIGTERM or SIGINT: STOPPING=1, stop accepting, close client connections,
flush every log, write the checkpoints and the clean-shutdown marker (so the next start
skips recovery), exit 0. Exit 1 when start-up or the clean close fails, and when every
log dir is offline (the message names each dir and why).

Log-dir health (daemon.health) runs from before the dirs open until shutdown: a dir
that fails is taken offline and the rest keep serving. With `zookeeper.connect` the
broker registers in ZooKeeper and notifies the controller of every dir that goes
OFFLINE or SATURATED (daemon.zk); it keeps serving while ZooKeeper is away. The HTTP
endpoint also carries the operator commands (`POST /admin/log-dirs/readmit|cordon|
uncordon`, `{"dir": PATH}`) and `GET /log-dirs`: keep `http.listen` on loopback.

Connections: requests on one connection are handled one at a time, in order, as Kafka
does; many connections run concurrently. A frame over `socket.request.max.bytes` is
refused before its body is read, and a frame that does not decode closes only its own
connection (daemon.protocol).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import os
import resource
import signal
import socket
import sys
import time
from typing import Any

import native
from logstore import LogStoreError

from . import config as config_mod
from .api import protocol
from .api.handlers import CLOSE, ConnInfo, Handlers
from .cluster.link import ClusterLink
from .health.monitor import AdminError, LogDirHealth
from .ops.metrics import HttpEndpoint, Metrics
from .ops.notify import Notifier
from .replica.manager import Broker
from .storage.dirstate import DirState

log = logging.getLogger("logkeeper.server")

CHECKPOINT_INTERVAL_S = 60.0  # Kafka's log.flush.offset.checkpoint.interval.ms default
METRICS_REFRESH_S = 10.0
STOP_GRACE_S = 10.0  # in-flight requests get this long to finish at shutdown
STREAM_LIMIT = 1 << 20
MAX_PIPELINED = 16  # Produce requests in flight per connection


class Server:
    def __init__(self, config: config_mod.Config, *, notifier: Notifier | None = None):
        self.config = config
        self.metrics = Metrics()
        self.broker = Broker(config, self.metrics)
        self.handlers = Handlers(self.broker, self.metrics)
        self.dir_health = LogDirHealth(self.broker, self.metrics, config,
                                       on_all_offline=self._on_all_offline)
        self.cluster: ClusterLink | None = None
        self.notifier = notifier or Notifier.from_environment()
        self.http = HttpEndpoint(self.metrics, self.health, admin=self._admin,
                                 views={"/log-dirs": self.dir_health.describe})
        self.fatal: str | None = None  # why the daemon stops on its own
        self.stuck_workers = False  # a hung disk's worker: exit without joining it
        self.listener: asyncio.base_events.Server | None = None
        self.stop_event = asyncio.Event()
        self.state = "starting"
        # Connection task -> whether it is in the middle of a request.
        self._connections: dict[asyncio.Task[None], bool] = {}
        self._background: list[asyncio.Task[None]] = []
        self.bound: tuple[str, int] | None = None
        self.advertised: tuple[str, int] | None = None

    # ---- health ----

    def health(self) -> tuple[bool, dict[str, Any]]:
        dirs = {str(d.path): d.state.value for d in self.broker.dirs.dirs}
        any_online = any(d.state is not DirState.OFFLINE for d in self.broker.dirs.dirs)
        ok = self.state == "serving" and any_online
        return ok, {"status": self.state, "broker_id": self.config.broker_id,
                    "log_dirs": dirs, "partitions": len(self.broker.partitions),
                    "offline_partitions": sum(1 for p in self.broker.partitions.values()
                                              if p.offline),
                    "degraded": sorted(str(d.path) for d in self.broker.dirs.dirs if d.degraded)}

    async def _admin(self, action: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST /admin/<action> with {"dir": PATH}: the operator's log-dir commands."""
        commands = {
            "log-dirs/readmit": lambda p: self.dir_health.readmit(p),
            "log-dirs/cordon": lambda p: self.dir_health.cordon(p, True),
            "log-dirs/uncordon": lambda p: self.dir_health.cordon(p, False),
        }
        if action not in commands:
            return 404, {"error": f"unknown command {action!r}; known: {sorted(commands)}"}
        path = payload.get("dir")
        if not isinstance(path, str) or not path:
            return 400, {"error": 'the body must be {"dir": "<log dir path>"}'}
        if self.state != "serving":
            return 503, {"error": f"the daemon is {self.state}"}
        try:
            return 200, await commands[action](path)
        except AdminError as err:
            return err.status, {"error": str(err)}

    def _on_all_offline(self, message: str) -> None:
        self._on_fatal(message, status="every log dir is offline")

    def _on_fatal(self, message: str, *, status: str = "") -> None:
        """Stop on our own, exiting 1 (every dir offline, a broker.id taken, ...)."""
        if self.fatal is None:
            self.fatal = message
            log.error("%s; stopping", message)
            self.notifier.stopping(status or message)
            self.stop_event.set()

    # ---- lifecycle ----

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        # Pinged during start-up too: recovery runs on the workers, the loop stays live.
        self._background.append(asyncio.ensure_future(self._watchdog()))
        try:
            host, port = self.config.http_listen
            http_at = await self.http.start(host, port)
            log.info("metrics and health on http://%s:%d/", *http_at[:2])
        except OSError as err:
            log.error("cannot listen on http.listen %s: %s", self.config["http.listen"],
                      err.strerror or err)
            await self._stop_background()
            return 1
        self.notifier.status("opening log dirs")
        # Calibrates the CRC-32C dispatch here (a few hundred microseconds) rather than
        # on the first produce, and says what it chose.
        log.info("CRC-32C: %s (of %s this CPU runs)", native.crc32c_active(),
                 ", ".join(i for i in native.CRC32C_IMPLS if native.crc32c_supported(i)))
        started = time.monotonic()
        self.dir_health.attach()
        try:
            await self.broker.start()
        except (LogStoreError, OSError) as err:
            log.error("start-up failed: %s", err)
            await self._stop_background()
            await self.dir_health.stop()
            await self.http.close()
            self.stuck_workers = not self.broker.dirs.shutdown_workers()
            return 1
        self._log_recovery(time.monotonic() - started)
        lst = self.config.listener
        try:
            self.listener = await asyncio.start_server(
                self._on_connection, lst.host or None, lst.port, limit=STREAM_LIMIT,
                reuse_address=True)
        except OSError as err:
            log.error("cannot listen on %s: %s", lst, err.strerror or err)
            await self._shutdown()
            return 1
        self.bound = self.listener.sockets[0].getsockname()[:2]
        self.advertised = self._advertised_address()
        self.handlers.advertised = self.advertised
        if not self.config.standalone:
            self._join_cluster()
        await self.dir_health.start()
        self.state = "serving"
        log.info("serving Kafka protocol on %s:%d, advertised as %s:%d (broker.id %d, "
                 "%d partitions, %d log dirs)", self.bound[0], self.bound[1],
                 self.advertised[0], self.advertised[1], self.config.broker_id,
                 len(self.broker.partitions), len(self.broker.dirs.dirs))
        self.notifier.ready(f"serving on {self.bound[0]}:{self.bound[1]}")
        self._background += [
            asyncio.ensure_future(self._periodic(
                self.config["log.retention.check.interval.ms"] / 1000,
                lambda: self.broker.maintenance(retention=True, checkpoints=False))),
            asyncio.ensure_future(self._periodic(
                CHECKPOINT_INTERVAL_S,
                lambda: self.broker.maintenance(retention=False, checkpoints=True))),
            asyncio.ensure_future(self._periodic(METRICS_REFRESH_S,
                                                 self._refresh_dirs, first=0)),
        ]
        if self.fatal is None:
            await self.stop_event.wait()
        code = await self._shutdown()
        return 1 if self.fatal is not None else code

    def _advertised_address(self) -> tuple[str, int]:
        """What Metadata and the ZooKeeper registration give clients (Kafka's
        KafkaServer.createBrokerInfo): advertised.listeners, else the listener; an empty
        host is this host's name, port 0 the port the listener was given."""
        assert self.bound is not None  # called once the listener is bound
        adv = self.config.advertised_listener
        return adv.host or socket.getfqdn(), adv.port or self.bound[1]

    def _join_cluster(self) -> None:
        assert self.advertised is not None  # called once the listener is bound
        host, port = self.advertised
        loop = asyncio.get_running_loop()
        self.cluster = ClusterLink(self.config["zookeeper.connect"], self.config.broker_id,
                                   host, port,
                                   session_timeout=self.config["zookeeper.session.timeout.ms"] / 1000,
                                   on_fatal=lambda why: loop.call_soon_threadsafe(self._on_fatal, why))
        self.dir_health.cluster = self.cluster
        for d in self.broker.dirs.dirs:
            if d.state is not DirState.ONLINE:  # failed before the link existed
                self.cluster.announce_log_dir_event(str(d.path))
        self.cluster.start()
        log.info("registering as broker %d in ZooKeeper at %s", self.config.broker_id,
                 self.config["zookeeper.connect"])

    async def _refresh_dirs(self) -> None:
        await self.broker.refresh_dir_metrics()
        self.dir_health.publish()  # free bytes change: the controller's view follows

    def _on_signal(self, sig: int) -> None:
        if self.stop_event.is_set():
            return
        log.info("%s: stopping", signal.Signals(sig).name)
        self.notifier.stopping("flushing and writing checkpoints")
        self.stop_event.set()

    async def _shutdown(self) -> int:
        self.state = "stopping"
        self.handlers.stopping.set()
        if self.listener is not None:
            self.listener.close()  # stop accepting first
        await self._stop_background()
        await self.dir_health.stop()
        for task, busy in list(self._connections.items()):
            if not busy:
                task.cancel()  # idle: waiting for a request that will not be served
        if self._connections:
            # Let in-flight requests finish (long-polls return at once), then close.
            _, pending = await asyncio.wait(list(self._connections), timeout=STOP_GRACE_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        failures, self.stuck_workers = await self.broker.stop()
        for d, err in failures:
            log.error("closing log dir %s failed: %s", d.path, err)
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.stop)
        await self.http.close()
        self.notifier.close()
        if failures:
            return 1
        log.info("stopped cleanly: checkpoints and clean-shutdown markers written")
        return 0

    async def _stop_background(self) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background = []

    def _log_recovery(self, seconds: float) -> None:
        for d in self.broker.dirs.dirs:
            if d.logdir is None:
                continue
            cut = sum(r.bytes_truncated for r in d.logdir.recovery)
            recovered = sum(1 for r in d.logdir.recovery if r.recovered)
            self.metrics.recovered.labels(str(d.path)).inc(cut)
            if d.clean_shutdown:
                how = "clean shutdown, no recovery"
            elif d.logdir.created and not d.logdir.logs:
                how = "new log dir"
            else:
                how = f"no clean-shutdown marker: recovered {recovered} partitions, {cut} bytes cut"
            log.info("log dir %s: %d partitions (%s)", d.path, len(d.logdir.logs), how)
        log.info("log dirs loaded in %.2f s", seconds)

    async def _watchdog(self) -> None:
        interval = self.notifier.watchdog_interval
        if interval is None:
            return
        while True:
            # Sent from the event loop itself: a stuck loop stops the pings and systemd
            # restarts the service. A hung disk stalls only its worker, never this.
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    async def _periodic(self, interval: float, fn: Any, *, first: float | None = None) -> None:
        await asyncio.sleep(interval if first is None else first)
        while True:
            try:
                await fn()
            except Exception:  # noqa: BLE001 - a failed round is logged and retried
                log.exception("periodic task %s failed", getattr(fn, "__name__", fn))
            await asyncio.sleep(interval)

    # ---- connections ----

    def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.stop_event.is_set():
            writer.close()
            return
        task = asyncio.ensure_future(self._serve(reader, writer))
        self._connections[task] = False
        task.add_done_callback(lambda t: self._connections.pop(t, None))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read requests, dispatch them, and leave writing to `_write_responses`.

        Consecutive Produce requests are pipelined (up to MAX_PIPELINED): each one's
        appends are queued on the workers before the next is read, so order per
        partition is kept. Any other request first waits for everything before it to
        finish, so it observes their effects as with one-at-a-time processing.
        Responses always go out in request order.
        """
        local = writer.get_extra_info("sockname")
        peer = writer.get_extra_info("peername")
        conn = ConnInfo(local[0], local[1], f"{peer[0]}:{peer[1]}" if peer else "?")
        max_frame = self.config["socket.request.max.bytes"]
        me = asyncio.current_task()
        assert me is not None
        outq: asyncio.Queue[tuple[protocol.Request | None, asyncio.Future[Any], float] | None]
        outq = asyncio.Queue(MAX_PIPELINED)
        responder = asyncio.ensure_future(self._write_responses(outq, writer, conn))
        pending: list[asyncio.Future[Any]] = []
        prev_produce = False
        self.metrics.connections.inc()
        try:
            while not self.stop_event.is_set() and not responder.done():
                self._connections[me] = not all(t.done() for t in pending)
                frame = await protocol.read_frame(reader, max_frame)
                if frame is None:
                    break
                self._connections[me] = True
                started = time.perf_counter()
                try:
                    req = protocol.decode_request(frame)
                except protocol.UnsupportedVersion as err:
                    if err.api_key != 18:
                        raise
                    # ApiVersions at a version we do not know: answer so the client can
                    # retry at one we do (KIP-511).
                    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                    done.set_result(protocol.unsupported_api_versions_frame(err.correlation_id))
                    await outq.put((None, done, started))
                    continue
                produce = req.api.key == 0
                if not (produce and prev_produce) and pending:
                    await asyncio.wait(pending)
                    pending = []
                prev_produce = produce
                # The handler runs up to its first await now: a Produce queues its appends
                # on the workers here, in request order.
                task = asyncio.ensure_future(self.handlers.handle(req, conn))
                pending = [t for t in pending if not t.done()] + [task]
                await outq.put((req, task, started))
        except protocol.FrameTooLarge as err:
            self.metrics.bad_frames.labels("too_large").inc()
            log.warning("closing %s: %s", conn.peer, err)
        except (protocol.UnsupportedApi, protocol.UnsupportedVersion) as err:
            # Well-formed, just not served here (Kafka closes the connection too).
            reason = ("unsupported_api" if isinstance(err, protocol.UnsupportedApi)
                      else "unsupported_version")
            self.metrics.bad_frames.labels(reason).inc()
            log.warning("closing %s: %s", conn.peer, err)
        except protocol.ProtocolError as err:
            self.metrics.bad_frames.labels("undecodable").inc()
            log.warning("closing %s: %s", conn.peer, err)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            responder.cancel()
            raise
        finally:
            # Answers already due are still written, then the connection closes.
            if not responder.done():
                try:
                    outq.put_nowait(None)
                except asyncio.QueueFull:
                    await outq.put(None)
                await asyncio.wait([responder], timeout=STOP_GRACE_S)
                responder.cancel()
            self.metrics.connections.dec()
            writer.close()

    async def _write_responses(self, outq: asyncio.Queue[Any], writer: asyncio.StreamWriter,
                               conn: ConnInfo) -> None:
        try:
            while True:
                item = await outq.get()
                if item is None:
                    return
                req, fut, started = item
                response = await fut
                if req is None:  # a ready-made frame
                    writer.write(response)
                    await writer.drain()
                    continue
                if response is CLOSE:
                    log.info("closing %s: an acks=0 produce failed", conn.peer)
                    writer.close()
                    return
                if response is not None:
                    writer.write(protocol.encode_response(req, response))
                    await writer.drain()
                self.metrics.requests.labels(req.name, str(req.version)).inc()
                self.metrics.request_bytes.labels(req.name).inc(req.size)
                self.metrics.request_time.labels(req.name).observe(time.perf_counter() - started)
        except (ConnectionError, asyncio.CancelledError):
            writer.close()
        except Exception:  # noqa: BLE001 - a handler bug closes this connection only
            self.metrics.bad_frames.labels("server_error").inc()
            log.exception("closing %s after an unexpected error", conn.peer)
            writer.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logkeeper serve", description=(
        "Run the storage daemon: a Kafka-protocol storage node for this host's log dirs."))
    p.add_argument("--config", metavar="FILE",
                   help="Kafka's server.properties (Java properties) or TOML, keyed by "
                        "Kafka's property names; *.properties or a file that is not TOML "
                        "is read as properties (default: embedded defaults, three log dirs "
                        "under ./data)")
    p.add_argument("--help-config", action="store_true", help="list the config keys and exit")
    p.add_argument("--log-level", default=os.environ.get("LOGKEEPER_LOG_LEVEL", "INFO"),
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.help_config:
        print(config_mod.describe())
        return 0
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr,
        # systemd's journal stamps each line itself; elsewhere a timestamp helps.
        format=("%(levelname)s %(name)s: %(message)s" if os.environ.get("JOURNAL_STREAM")
                else "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    try:
        cfg = config_mod.load(args.config)
    except config_mod.ConfigError as err:
        print(f"logkeeper serve: {err}", file=sys.stderr)
        return 2
    for warning in cfg.warnings:
        log.warning("%s", warning)
    _raise_fd_limit()
    # `kill -USR1` prints every thread's stack to stderr: what a stuck daemon is doing.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    server = Server(cfg)
    code = asyncio.run(server.run())
    if server.fatal is not None:
        print(f"logkeeper serve: {server.fatal}", file=sys.stderr)
    if server.stuck_workers:
        # A worker is stuck in a syscall on a hung disk: the interpreter would join it
        # at exit forever. Everything else is closed; leave without it.
        log.error("a log dir's worker is stuck on its disk; exiting without it")
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    return code


def _raise_fd_limit() -> None:
    """Lift the soft RLIMIT_NOFILE to the hard limit: every segment holds three fds, so
    1,000 partitions need ~5,000 (systemd's LimitNOFILE= sets both limits)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else 1 << 20
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as err:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, target, err)
