"""The one way logkeeper makes a ZooKeeper client: kazoo, over TLS when the broker's
config says so, creating znodes with Kafka's ACLs when zookeeper.set.acl says so.

- TLS (zookeeper.ssl.client.enable): kazoo's own TLS takes PEM file paths and its own
  defaults; `_TlsHandler` makes each connection with the SSLContext built from Kafka's
  zookeeper.ssl.* keys instead (daemon.security.tls.zookeeper_settings: PKCS12 or PEM
  key material, Kafka's protocol and host name rules), so the key never reaches a file.
- Secure ACLs (zookeeper.set.acl), as Kafka's ZkData.defaultAcls: every znode created
  is readable by everyone and writable only by its creator (the identity ZooKeeper's
  X509AuthenticationProvider gives this broker's certificate), and the znodes under
  the sensitive roots (user configs with their SCRAM credentials, broker configs)
  are not readable by others either.

Every broker, the controller (which shares the broker's client) and the admin tools'
--zookeeper get their client from `new_client`.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.security import CREATOR_ALL_ACL, READ_ACL_UNSAFE

# Kafka's ZkData.SensitiveRootPaths: /config/users, /config/brokers, /delegation_token.
SENSITIVE_ROOTS = ("/config/users", "/config/brokers", "/delegation_token")
SECURE_ACL = [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]
_OURS = (SECURE_ACL, list(CREATOR_ALL_ACL))  # an ACL kazoo passed on is recomputed


def acl_for(path: str) -> list[Any]:
    """The ACL Kafka gives a znode it creates with zookeeper.set.acl."""
    return list(CREATOR_ALL_ACL) if path.startswith(SENSITIVE_ROOTS) else list(SECURE_ACL)


class _TlsHandler(SequentialThreadingHandler):
    """kazoo's threading handler, its connections made with one SSLContext (kazoo
    passes its own TLS arguments too; they are not used)."""

    def __init__(self, context: ssl.SSLContext):
        super().__init__()
        self.context = context
        self.handshake_error: str | None = None  # the last failed handshake's, for errors

    def create_connection(self, address: tuple[str, int], hostname: str | None = None,
                          timeout: float | None = None, **_kazoo_tls: Any) -> socket.socket:
        sock = socket.create_connection(address, timeout)
        try:
            conn = self.context.wrap_socket(sock, server_hostname=hostname or address[0])
        except BaseException as err:
            sock.close()
            if isinstance(err, ssl.SSLError):
                self.handshake_error = f"{address[0]}:{address[1]}: {err}"
            raise
        self.handshake_error = None
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn


class _SecureAclClient(KazooClient):
    """A KazooClient whose creates get Kafka's secure ACLs by path, in transactions too,
    and each parent a create makes (makepath) by its own path: kazoo's default_acl is
    one ACL for every path, and kazoo hands a znode's ACL to the parents it creates."""

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, *args: Any,
                     **kwargs: Any) -> Any:
        if acl is None or acl in _OURS:
            acl = acl_for(path)
        return super().create_async(path, value, acl, *args, **kwargs)

    def transaction(self) -> TransactionRequest:
        return _SecureAclTransaction(self)


class _SecureAclTransaction(TransactionRequest):
    def create(self, path: str, value: bytes = b"", acl: Any = None, *args: Any,
               **kwargs: Any) -> None:
        super().create(path, value, acl_for(path) if acl is None else acl, *args, **kwargs)


def new_client(hosts: str, *, timeout: float, tls_context: ssl.SSLContext | None = None,
               secure_acls: bool = False, **kwargs: Any) -> KazooClient:
    """A kazoo client (not started) for `hosts`; `tls_context`: over TLS with it;
    `secure_acls`: zookeeper.set.acl's znode ACLs. `kwargs` go to KazooClient."""
    if tls_context is not None:
        kwargs.update(handler=_TlsHandler(tls_context), use_ssl=True)
    if secure_acls:
        return _SecureAclClient(hosts=hosts, timeout=timeout, default_acl=SECURE_ACL, **kwargs)
    return KazooClient(hosts=hosts, timeout=timeout, **kwargs)


def start(client: KazooClient, timeout: float) -> None:
    """`client.start(timeout)`; its KazooTimeoutError says why the last TLS handshake
    with ZooKeeper failed (a certificate not trusted, a host name it does not name...),
    which kazoo's time-out alone does not."""
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError as err:
        why = getattr(client.handler, "handshake_error", None)
        if why is None:
            raise
        raise KazooTimeoutError(f"{err}: the TLS handshake failed: {why}") from err
