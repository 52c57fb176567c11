"""The HTTP endpoint: /metrics, /healthz, JSON views, and the operators' POST /admin/.

A tiny HTTP/1.0-style server on the event loop. `/metrics` is the Prometheus exposition
(daemon.ops.metrics); `/healthz` answers the daemon's health callable as JSON (200 when
healthy, 503 otherwise, and 503 with the error when the callable raises); other GET
views (`/log-dirs`) are JSON from memory; `POST /admin/<cmd>` with a JSON body goes to
the daemon's admin handler and answers JSON with the handler's status. Malformed
requests get 400 and the connection is closed. Keep `http.listen` on loopback.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from .metrics import Metrics

log = logging.getLogger("logkeeper.metrics")

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            409: "Conflict", 413: "Payload Too Large", 415: "Unsupported Media Type",
            503: "Service Unavailable"}
MAX_ADMIN_BODY = 64 * 1024
AdminHandler = Callable[[str, dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]


class HttpEndpoint:
    """A tiny HTTP/1.0-style server for /metrics and /healthz on the event loop."""

    def __init__(self, metrics: Metrics, health: Callable[[], tuple[bool, dict[str, Any]]], *,
                 admin: AdminHandler | None = None,
                 views: dict[str, Callable[[], Any]] | None = None):
        self.metrics = metrics
        self.health = health
        self.admin = admin
        self.views = dict(views or {})
        self.server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, host or None, port)
        sock = self.server.sockets[0].getsockname()
        return sock[0], sock[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            parts = line.decode("latin-1").split()
            length, ctype = 0, ""
            while True:  # the headers: only Content-Length and Content-Type matter here
                h = await asyncio.wait_for(reader.readline(), 10)
                if h in (b"\r\n", b"\n", b""):
                    break
                name, _, value = h.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
                elif name.strip().lower() == "content-type":
                    ctype = value.split(";", 1)[0].strip().lower()
            if len(parts) < 2:
                await self._reply(writer, 400, b"bad request line\n", "text/plain")
                return
            method, target = parts[0], parts[1].split("?", 1)[0]
            if method == "POST" and target.startswith("/admin/") and self.admin is not None:
                if ctype != "application/json":
                    # A web page can make a browser POST a form or text/plain to this
                    # port without asking; application/json it must ask for first (a
                    # CORS preflight this endpoint never grants).
                    await self._reply(writer, 415, b'{"error": "POST /admin/ takes '
                                      b'Content-Type: application/json"}\n',
                                      "application/json")
                    return
                await self._admin(reader, writer, target[len("/admin/"):], length)
            elif method not in ("GET", "HEAD"):
                await self._reply(writer, 405, b"GET only (POST for /admin/)\n", "text/plain")
            elif target in self.views:
                body = (json.dumps(self.views[target](), sort_keys=True, default=str)
                        + "\n").encode()
                await self._reply(writer, 200, body, "application/json", head=method == "HEAD")
            elif target == "/metrics":
                await self._reply(writer, 200, self.metrics.render(), CONTENT_TYPE_LATEST,
                                  head=method == "HEAD")
            elif target == "/healthz":
                try:
                    ok, detail = self.health()
                except Exception as err:  # noqa: BLE001 - a broken check reads as unhealthy
                    log.exception("health check failed")
                    ok, detail = False, {"status": "error", "error": repr(err)}
                # default=str: a Path or an enum in the detail must still give an answer.
                body = (json.dumps(detail, sort_keys=True, default=str) + "\n").encode()
                await self._reply(writer, 200 if ok else 503, body, "application/json",
                                  head=method == "HEAD")
            else:
                await self._reply(writer, 404, b"try /metrics or /healthz\n", "text/plain")
        except (TimeoutError, ConnectionError, asyncio.LimitOverrunError, ValueError) as err:
            log.debug("http: dropped a client: %s", err)
        finally:
            writer.close()

    async def _admin(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     command: str, length: int) -> None:
        assert self.admin is not None
        if not 0 <= length <= MAX_ADMIN_BODY:
            await self._reply(writer, 413, b'{"error": "body too large"}\n', "application/json")
            return
        try:
            payload = json.loads(await asyncio.wait_for(reader.readexactly(length), 10) or b"{}")
        except (ValueError, asyncio.IncompleteReadError):
            payload = None
        if not isinstance(payload, dict):
            await self._reply(writer, 400, b'{"error": "the body must be a JSON object"}\n',
                              "application/json")
            return
        status, answer = await self.admin(command, payload)
        await self._reply(writer, status, (json.dumps(answer, default=str) + "\n").encode(),
                          "application/json")

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str, *,
                     head: bool = False) -> None:
        head_bytes = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                      f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        writer.write(head_bytes if head else head_bytes + body)
        await writer.drain()
