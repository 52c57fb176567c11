"""A TCP forwarder on loopback that a test can cut, for a network partition between one
process and a server (a broker and ZooKeeper) while both keep running.

`hold()` stops moving bytes: connections stay open but silent, and new ones are accepted
and left silent too, as behind a link that drops every packet. The server then ends
the sessions it stops hearing from. `release()` closes every connection made so far
(their peers reconnect) and forwards again. One thread does it all with `select`.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class TcpProxy:
    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._pairs: dict[socket.socket, socket.socket] = {}  # each end -> the other
        self._silent: list[socket.socket] = []  # accepted while held
        self._flowing = True
        self._reset = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def hold(self) -> None:
        self._flowing = False

    def release(self) -> None:
        self._reset = True
        self._flowing = True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._drop_all()
        self.listener.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the proxy's thread ----

    def _drop_all(self) -> None:
        for s in [*self._pairs, *self._silent]:
            with contextlib.suppress(OSError):
                s.close()
        self._pairs.clear()
        self._silent.clear()

    def _drop(self, s: socket.socket) -> None:
        other = self._pairs.pop(s, None)
        for x in (s, other):
            if x is not None:
                self._pairs.pop(x, None)
                with contextlib.suppress(OSError):
                    x.close()

    def _accept(self) -> None:
        client, _ = self.listener.accept()
        if not self._flowing:
            self._silent.append(client)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        self._pairs[client], self._pairs[upstream] = upstream, client

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._reset:
                self._reset = False
                self._drop_all()
            flowing = self._flowing
            watched = [self.listener, *(self._pairs if flowing else ())]
            ready, _, _ = select.select(watched, [], [], 0.05)
            for s in ready:
                if s is self.listener:
                    self._accept()
                    continue
                if s not in self._pairs or not self._flowing:
                    continue
                try:
                    data = s.recv(1 << 16)
                    if data:
                        self._pairs[s].sendall(data)
                        continue
                except OSError:
                    pass
                self._drop(s)
