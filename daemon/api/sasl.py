"""SASL logins on SASL_PLAINTEXT and SASL_SSL listeners, and the SCRAM credentials they
check: SaslHandshake (17), SaslAuthenticate (36), DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51), as Kafka's SaslServerAuthenticator and its admin APIs
answer them (daemon.security.sasl holds the mechanisms).

A connection to a SASL listener is served nothing but ApiVersions, SaslHandshake and
SaslAuthenticate until its login succeeds (anything else closes it, as Kafka does).
SaslHandshake v1 is followed by SaslAuthenticate requests; v0 by bare SASL tokens, each
answered with a bare token (`raw_token`; pre-1.0 clients). A failed login is answered
SASL_AUTHENTICATION_FAILED (58) with the reason, and the connection closes after the
answer. On a listener without SASL both requests answer ILLEGAL_SASL_STATE (34).
Re-authentication (KIP-368): with `connections.max.reauth.ms` set, a login's session
lasts that long (SaslAuthenticate v1+ says so in `session_lifetime_ms`); the client logs
in again on the same connection before then (SaslHandshake and SaslAuthenticate once
more, the same mechanism and principal), and a connection whose session has expired is
closed at its next request, as Kafka's. So a user whose credential is removed loses its
connections within that time. Unset (0, Kafka's default): a login lasts as long as its
connection.

SCRAM credentials are set as Kafka's clients set them: the client sends the salt and the
salted password, never the password; the broker keeps the StoredKey and ServerKey
derived from them, where Kafka keeps them (`store`).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kafka.protocol.admin import (
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from ..security import sasl
from ..security.acls import Operation, ResourceType
from . import errors, protocol

log = logging.getLogger("logkeeper.sasl")

SASL_APIS = (17, 36)  # what a SASL listener serves before a login, besides ApiVersions
ILLEGAL_SASL_STATE, UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 34, 33, 58
RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 91, 92, 93
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism type
_IDS = {name: i for i, name in MECHANISM_IDS.items()}


class Login:
    """One connection's login: the mechanism's server, and whether it came through a
    v0 handshake (bare tokens)."""

    __slots__ = ("server", "raw", "mechanism")

    def __init__(self, server: sasl.PlainServer | sasl.ScramServer, mechanism: str, raw: bool):
        self.server, self.mechanism, self.raw = server, mechanism, raw


class SaslApis:
    """`listeners`: each SASL listener's settings; `credentials`: the SCRAM credentials
    held here; `store(user, config)`: write a user's credentials where this broker keeps
    them (ZooKeeper or the dirs' file), after which `credentials.set` applies them."""

    def __init__(self, listeners: Mapping[str, sasl.SaslSettings], credentials: sasl.Credentials,
                 store: Callable[[str, dict[str, str]], Awaitable[None]],
                 on_login: Callable[[str, bool], None] = lambda listener, ok: None, *,
                 max_reauth_ms: int = 0, clock: Callable[[], float] = time.monotonic):
        self.listeners = listeners
        self.max_reauth_ms = max_reauth_ms  # connections.max.reauth.ms: 0, logins never expire
        self.clock = clock
        self.credentials = credentials
        self.store = store
        self.on_login = on_login  # (listener, succeeded): the metrics

    def dispatch(self) -> dict[int, Callable[..., Awaitable[Any]]]:
        """The APIs by key. The connection answers 17 and 36 itself, on the spot (what it
        serves next depends on them); these entries are the same answers."""
        async def handshake(req: protocol.Request, conn: Any) -> Any:
            return self.handshake(req, conn)

        async def authenticate(req: protocol.Request, conn: Any) -> Any:
            return self.authenticate(req, conn)

        return {17: handshake, 36: authenticate, 50: self.describe_scram,
                51: self.alter_scram}

    # ---- the login, answered at once by the connection (daemon.api.connections) ----

    def handshake(self, req: protocol.Request, conn: Any) -> Any:
        mechanism = req.body.mechanism
        own = self.listeners.get(conn.listener)
        enabled = list(own.mechanisms) if own is not None else []
        reauth = conn.authenticated and own is not None and self.max_reauth_ms > 0
        if own is None or (conn.authenticated and not reauth):
            return SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=enabled)
        if reauth and mechanism != conn.mechanism:
            log.info("%s asked to re-authenticate with %s, not %s: closing", conn.peer,
                     mechanism, conn.mechanism)
            conn.close_after = True
            return SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=enabled)
        if mechanism not in own.mechanisms:
            log.info("%s asked for SASL mechanism %s on listener %s, which enables %s",
                     conn.peer, mechanism, conn.listener, ", ".join(own.mechanisms))
            conn.close_after = True
            return SaslHandshakeResponse(error_code=UNSUPPORTED_SASL_MECHANISM,
                                         mechanisms=enabled)
        conn.login = Login(own.server(mechanism, self.credentials), mechanism, req.version == 0)
        return SaslHandshakeResponse(error_code=errors.NONE, mechanisms=enabled)

    def authenticate(self, req: protocol.Request, conn: Any) -> Any:
        login = conn.login
        if login is None or login.raw:
            conn.close_after = True
            return SaslAuthenticateResponse(
                error_code=ILLEGAL_SASL_STATE, error_message="SaslAuthenticate came without "
                "a SaslHandshake v1 before it", auth_bytes=b"", session_lifetime_ms=0)
        try:
            answer = self._step(conn, login, bytes(req.body.auth_bytes))
        except sasl.AuthenticationFailed as err:
            return SaslAuthenticateResponse(error_code=SASL_AUTHENTICATION_FAILED,
                                            error_message=str(err), auth_bytes=b"",
                                            session_lifetime_ms=0)
        return SaslAuthenticateResponse(
            error_code=errors.NONE, error_message=None, auth_bytes=answer,
            session_lifetime_ms=self.max_reauth_ms if conn.login is None else 0)

    def raw_token(self, conn: Any, token: bytes) -> bytes | None:
        """A bare token after a v0 handshake: the bare answer, framed; None when the
        login failed (the connection closes, as Kafka's v0 does)."""
        try:
            answer = self._step(conn, conn.login, token)
        except sasl.AuthenticationFailed:
            return None
        return struct.pack(">i", len(answer)) + answer

    def _step(self, conn: Any, login: Login, token: bytes) -> bytes:
        try:
            answer, done = login.server.step(token)
        except sasl.AuthenticationFailed as err:
            log.info("%s failed to log in with %s on listener %s: %s", conn.peer,
                     login.mechanism, conn.listener, err)
            conn.close_after = True
            self.on_login(conn.listener, False)
            raise
        if done:
            principal = f"User:{login.server.user}"
            if conn.authenticated and principal != conn.principal:
                log.info("%s re-authenticated as %s, not %s: closing", conn.peer, principal,
                         conn.principal)
                conn.close_after = True
                self.on_login(conn.listener, False)
                raise sasl.AuthenticationFailed(
                    f"Cannot change principals during re-authentication from "
                    f"{conn.principal}: {principal}")
            self.on_login(conn.listener, True)
            log.debug("%s %s as %s with %s", conn.peer, "re-authenticated" if conn.authenticated
                      else "logged in", principal, login.mechanism)
            conn.authenticated = True
            conn.principal = principal
            conn.mechanism = login.mechanism
            conn.login = None
            if self.max_reauth_ms > 0:
                conn.session_expires = self.clock() + self.max_reauth_ms / 1000
        return answer

    def expired(self, conn: Any) -> bool:
        """Whether the connection's login has outlived its session (closed at its next
        request, as Kafka's)."""
        return conn.session_expires is not None and self.clock() > conn.session_expires

    # ---- SCRAM credentials ----

    async def describe_scram(self, req: protocol.Request, conn: Any) -> Any:
        R = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
        if not conn.allowed(Operation.DESCRIBE, ResourceType.CLUSTER):
            return DescribeUserScramCredentialsResponse(
                throttle_time_ms=0, error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
                error_message="Cluster authorization failed.", results=[])
        users = req.body.users
        # No users, or an empty list (librdkafka's "all"): every user, as Kafka's.
        names = sorted(self.credentials.users) if not users else [u.name for u in users]
        results = []
        seen: set[str] = set()
        for name in names:
            if name in seen:
                results.append(R(user=name, error_code=DUPLICATE_RESOURCE,
                                 error_message=f"Cannot describe SCRAM credentials for the "
                                 f"same user twice in a single request: {name}",
                                 credential_infos=[]))
                continue
            seen.add(name)
            creds = self.credentials.users.get(name)
            if not creds:
                results.append(R(user=name, error_code=RESOURCE_NOT_FOUND,
                                 error_message=f"Attempt to describe a user credential that "
                                 f"does not exist: {name}", credential_infos=[]))
                continue
            results.append(R(user=name, error_code=errors.NONE, error_message=None,
                             credential_infos=[R.CredentialInfo(mechanism=_IDS[m],
                                                                iterations=c.iterations)
                                               for m, c in sorted(creds.items())]))
        return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=errors.NONE,
                                                    error_message=None, results=results)

    async def alter_scram(self, req: protocol.Request, conn: Any) -> Any:
        """Each user's deletions and upsertions checked (Kafka's rules: a known
        mechanism, 4096-16384 iterations, a user once per request), then the user's
        credentials written as a whole. A user with a bad item changes nothing."""
        R = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
        body = req.body
        changes: dict[str, list[tuple[str, Any]]] = {}
        for d in body.deletions:
            changes.setdefault(d.name, []).append(("delete", d))
        for u in body.upsertions:
            changes.setdefault(u.name, []).append(("upsert", u))
        results = []
        allowed = conn.allowed(Operation.ALTER, ResourceType.CLUSTER)
        for user, items in changes.items():
            code, message = self._check(user, items) if allowed else (
                errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
            if code == errors.NONE:
                new = dict(self.credentials.stored(user))
                for kind, item in items:
                    mechanism = MECHANISM_IDS[item.mechanism]
                    if kind == "delete":
                        new.pop(mechanism, None)
                    else:
                        new[mechanism] = sasl.make_credential(
                            mechanism, bytes(item.salted_password), item.iterations,
                            bytes(item.salt)).to_kafka()
                try:
                    await self.store(user, new)
                    self.credentials.set(user, new)
                    log.info("SCRAM credentials of user %s set: %s", user,
                             ", ".join(sorted(new)) or "none")
                except Exception as err:  # noqa: BLE001 - per user, as Kafka answers it
                    code, message = errors.error_of(err, "alter SCRAM credentials")
            results.append(R(user=user, error_code=code, error_message=message))
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results)

    def _check(self, user: str, items: list[tuple[str, Any]]) -> tuple[int, str | None]:
        if not user:
            return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
        mechanisms = [item.mechanism for _, item in items]
        if len(set(mechanisms)) != len(mechanisms):
            return DUPLICATE_RESOURCE, ("A user credential cannot be altered twice in the "
                                        "same request")
        for kind, item in items:
            if item.mechanism not in MECHANISM_IDS:
                return UNSUPPORTED_SASL_MECHANISM, (f"Unknown SCRAM mechanism type "
                                                    f"{item.mechanism}")
            name = MECHANISM_IDS[item.mechanism]
            if kind == "delete" and self.credentials.get(user, name) is None:
                return RESOURCE_NOT_FOUND, ("Attempt to delete a user credential that does "
                                            "not exist")
            if kind == "upsert":
                if not sasl.MIN_ITERATIONS <= item.iterations <= sasl.MAX_ITERATIONS:
                    return UNACCEPTABLE_CREDENTIAL, (
                        f"Iterations {item.iterations} must be between "
                        f"{sasl.MIN_ITERATIONS} and {sasl.MAX_ITERATIONS} for {name}")
                if not item.salt or not item.salted_password:
                    return UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
        return errors.NONE, None
