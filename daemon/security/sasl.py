"""SASL for SASL_PLAINTEXT and SASL_SSL listeners: Kafka's PLAIN and SCRAM-SHA-256/512.

The server side is ours (Kafka's PlainSaslServer and ScramSaslServer, RFC 4616 and RFC
5802/7677); the client side, for the connections brokers make to each other and for the
tools, is kafka-python's mechanisms (`client_mechanism`).

- PLAIN checks a user's password against the listener's JAAS config, as Kafka's
  PlainServerCallbackHandler does: `listener.name.<listener>.plain.sasl.jaas.config =
  org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
  password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";` (the
  `user_<name>` options are the users; `username`/`password` are what this broker itself
  logs in with to other brokers).
- SCRAM checks a client's proof against the user's stored credential (salt, StoredKey,
  ServerKey, iterations: never the password), kept where Kafka keeps it
  (`/config/users/<user>` in ZooKeeper, the log dirs' config file standalone) and set by
  AlterUserScramCredentials (`Credentials`).

A failed login answers SASL_AUTHENTICATION_FAILED with Kafka's message and closes the
connection; nothing else is served on the connection before a login succeeds.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PLAIN = "PLAIN"
SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
NOT_SERVED = ("GSSAPI", "OAUTHBEARER")
# Kafka's bounds for SCRAM iterations (ScramMechanism.minIterations, and the 16384 of
# AlterUserScramCredentials' validation).
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class SaslError(ValueError):
    """A SASL setting or credential that cannot be used."""


class AuthenticationFailed(Exception):
    """A login refused; the message is what the client is told (Kafka's wording)."""


# ---- JAAS ----

_JAAS_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))')


def parse_jaas(text: str) -> tuple[str, str, dict[str, str]]:
    """`<LoginModule class> <required|requisite|sufficient|optional> key=value ... ;`,
    Kafka's JaasConfig form of sasl.jaas.config (one login module): (module, flag,
    options). SaslError on anything else."""
    tokens: list[tuple[str, bool]] = []  # (text, quoted)
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _JAAS_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise SaslError(f"cannot read the JAAS config at {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.group(1) is not None:
            tokens.append((re.sub(r"\\(.)", r"\1", m.group(1)), True))
        else:
            tokens.append((m.group(2) or m.group(3) or m.group(4), False))
        if pos < len(text) and text[pos:].strip() == "":
            break
    if len(tokens) < 3 or tokens[-1] != (";", False):
        raise SaslError("expected `<LoginModule> required key=\"value\" ... ;` ending in ;")
    module, flag = tokens[0][0], tokens[1][0]
    if flag.lower() not in ("required", "requisite", "sufficient", "optional"):
        raise SaslError(f"{flag!r} is not a login module flag (required, ...)")
    if ";" in (t for t, q in tokens[:-1] if not q):
        raise SaslError("one login module only (Kafka's rule for sasl.jaas.config)")
    options: dict[str, str] = {}
    rest = tokens[2:-1]
    if len(rest) % 3:
        raise SaslError("expected key=value options")
    for i in range(0, len(rest), 3):
        (key, _), (eq, eq_quoted), (value, _) = rest[i:i + 3]
        if eq != "=" or eq_quoted:
            raise SaslError(f"option {key!r} has no value")
        options[key] = value
    return module, flag.lower(), options


# ---- SCRAM credentials ----

@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        try:
            fields = dict(item.split("=", 1) for item in text.split(","))
            return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                       base64.b64decode(fields["server_key"]), int(fields["iterations"]))
        except (KeyError, ValueError) as err:
            raise SaslError(f"not a SCRAM credential ({err})") from err


def make_credential(mechanism: str, password: bytes, iterations: int,
                    salt: bytes | None = None) -> ScramCredential:
    """A user's credential from a password (Kafka's ScramFormatter.generateCredential),
    or from an already salted password when `salt` is given with `password` salted."""
    h = SCRAM_MECHANISMS[mechanism]
    if salt is None:
        salt = os.urandom(32)
        password = hashlib.pbkdf2_hmac(h, password, salt, iterations)
    client_key = hmac.digest(password, b"Client Key", h)
    return ScramCredential(salt, hashlib.new(h, client_key).digest(),
                           hmac.digest(password, b"Server Key", h), iterations)


class Credentials:
    """Every user's SCRAM credentials, by user and mechanism (what `/config/users/<user>`
    holds: `{"SCRAM-SHA-256": "salt=...,stored_key=...,server_key=...,iterations=N"}`).
    Event loop only."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, ScramCredential]] = {}
        self.loaded = False  # a broker in a cluster reads them once it is registered

    def load(self, users: Mapping[str, Mapping[str, str]]) -> None:
        self.loaded = True
        self.users = {}
        for user, config in users.items():
            self.set(user, config)

    def set(self, user: str, config: Mapping[str, str]) -> None:
        """A user's stored config (other keys, e.g. quotas, are not ours)."""
        creds = {}
        for mechanism, text in config.items():
            if mechanism in SCRAM_MECHANISMS:
                try:
                    creds[mechanism] = ScramCredential.from_kafka(text)
                except SaslError:
                    continue  # a damaged credential logs nobody in
        if creds:
            self.users[user] = creds
        else:
            self.users.pop(user, None)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def stored(self, user: str) -> dict[str, str]:
        """The user's config as stored (Kafka's text form)."""
        return {m: c.to_kafka() for m, c in sorted(self.users.get(user, {}).items())}


# ---- the server side ----

class PlainServer:
    """RFC 4616: one message, `authzid NUL authcid NUL password`."""

    def __init__(self, users: Mapping[str, str]):
        self.users = users
        self.user: str | None = None

    def step(self, token: bytes) -> tuple[bytes, bool]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        self.user = user
        return b"", True


class ScramServer:
    """RFC 5802: client-first, server-first, client-final, server-final."""

    def __init__(self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None],
                 loaded: Callable[[], bool] = lambda: True):
        self.mechanism = mechanism
        self.loaded = loaded
        self.hash = SCRAM_MECHANISMS[mechanism]
        self.lookup = lookup
        self.user: str | None = None
        self._state = 0
        self._first_bare = b""
        self._server_first = b""
        self._nonce = b""
        self._cred: ScramCredential | None = None

    def step(self, token: bytes) -> tuple[bytes, bool]:
        if self._state == 0:
            return self._client_first(token), False
        if self._state == 1:
            return self._client_final(token), True
        raise AuthenticationFailed("Unexpected SASL/SCRAM message after authentication")

    def _client_first(self, token: bytes) -> bytes:
        m = re.fullmatch(rb"([ny]|p=[^,]*),(a=[^,]*)?,(n=([^,]*),r=([^,]+)(,.*)?)", token)
        if m is None:
            raise AuthenticationFailed(f"Authentication failed: invalid SCRAM client first "
                                       f"message for {self.mechanism}")
        if m.group(1).startswith(b"p="):
            raise AuthenticationFailed("Authentication failed: channel binding is not supported")
        user = m.group(4).decode("utf-8", "replace").replace("=2C", ",").replace("=3D", "=")
        authzid = m.group(2)
        if authzid and authzid[2:].decode("utf-8", "replace") != user:
            raise AuthenticationFailed("Authentication failed: Authorization id does not "
                                       "match the user name")
        cred = self.lookup(user, self.mechanism)
        if cred is None and not self.loaded():
            raise AuthenticationFailed("Authentication failed: this broker has not read the "
                                       "SCRAM credentials from ZooKeeper yet; try again")
        if cred is None:
            raise AuthenticationFailed(f"Authentication failed during authentication due to "
                                       f"invalid credentials with SASL mechanism {self.mechanism}")
        self.user, self._cred = user, cred
        self._first_bare = m.group(3)
        self._nonce = m.group(5) + base64.b64encode(os.urandom(18)).replace(b"/", b"_")
        self._server_first = (b"r=" + self._nonce + b",s=" + base64.b64encode(cred.salt)
                              + b",i=" + str(cred.iterations).encode())
        self._state = 1
        return self._server_first

    def _client_final(self, token: bytes) -> bytes:
        m = re.fullmatch(rb"(c=([^,]*),r=([^,]+)(?:,[^p][^,]*)*),p=([^,]+)", token)
        cred = self._cred
        assert cred is not None
        # Kafka's own check is endsWith: older librdkafka sends its nonce twice.
        if m is None or not m.group(3).endswith(self._nonce):
            raise AuthenticationFailed("Authentication failed: Invalid client nonce in the "
                                       "final client message.")
        auth_message = self._first_bare + b"," + self._server_first + b"," + m.group(1)
        try:
            proof = base64.b64decode(m.group(4), validate=True)
        except ValueError as err:
            raise AuthenticationFailed("Authentication failed: invalid client proof") from err
        signature = hmac.digest(cred.stored_key, auth_message, self.hash)
        if len(proof) != len(signature):
            raise AuthenticationFailed("Authentication failed: invalid client proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), cred.stored_key):
            raise AuthenticationFailed(f"Authentication failed during authentication due to "
                                       f"invalid credentials with SASL mechanism {self.mechanism}")
        self._state = 2
        return b"v=" + base64.b64encode(hmac.digest(cred.server_key, auth_message, self.hash))


# ---- a listener's settings ----

@dataclass(frozen=True, repr=False)
class SaslSettings:
    """One SASL listener: its mechanisms, the PLAIN users of its JAAS config, and the
    login this broker uses to other brokers' SASL listener (its JAAS `username` and
    `password`, per mechanism)."""

    listener: str
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    logins: Mapping[str, tuple[str, str]]  # mechanism -> (username, password)

    def __repr__(self) -> str:  # never a password
        return f"SaslSettings({self.listener}, {', '.join(self.mechanisms)})"

    def server(self, mechanism: str, credentials: Credentials) -> PlainServer | ScramServer:
        if mechanism == PLAIN:
            return PlainServer(self.plain_users)
        return ScramServer(mechanism, credentials.get, lambda: credentials.loaded)


def settings(listener: str, mechanisms: tuple[str, ...],
             jaas: Mapping[str, str | None]) -> SaslSettings:
    """A SASL listener's settings from its enabled mechanisms and each one's
    sasl.jaas.config text (`jaas[mechanism]`, None when not given). SaslError names what
    is wrong."""
    if not mechanisms:
        raise SaslError("no SASL mechanism is enabled (sasl.enabled.mechanisms)")
    for m in mechanisms:
        if m in NOT_SERVED:
            raise SaslError(f"{m} is not served by logkeeper (no Kerberos or OAuth); enable "
                            f"{', '.join(MECHANISMS)} in sasl.enabled.mechanisms")
        if m not in MECHANISMS:
            raise SaslError(f"{m} is not a SASL mechanism logkeeper serves "
                            f"({', '.join(MECHANISMS)})")
    plain: dict[str, str] = {}
    logins: dict[str, tuple[str, str]] = {}
    for m in mechanisms:
        text = jaas.get(m)
        module = PLAIN_MODULE if m == PLAIN else SCRAM_MODULE
        if text is None:
            if m == PLAIN:
                raise SaslError(f"PLAIN needs its users: set listener.name."
                                f"{listener.lower()}.plain.sasl.jaas.config = {module} "
                                'required user_alice="alice-secret";')
            continue
        got, _flag, options = parse_jaas(text)
        if got != module:
            raise SaslError(f"{m}'s sasl.jaas.config names {got}; expected {module}")
        if m == PLAIN:
            plain = {k[len("user_"):]: v for k, v in options.items() if k.startswith("user_")}
            if not plain:
                raise SaslError('PLAIN\'s sasl.jaas.config defines no user (user_<name>="<password>")')
        if "username" in options or "password" in options:
            if not options.get("username") or "password" not in options:
                raise SaslError(f"{m}'s sasl.jaas.config gives a username without a "
                                "password, or a password without a username")
            logins[m] = (options["username"], options["password"])
    return SaslSettings(listener, mechanisms, plain, logins)


def client_mechanism(mechanism: str, username: str, password: str) -> Any:
    """kafka-python's client side of `mechanism`: auth_bytes(), receive(), is_done(),
    is_authenticated()."""
    from kafka.net.sasl import get_sasl_mechanism

    return get_sasl_mechanism(mechanism)(sasl_mechanism=mechanism, sasl_plain_username=username,
                                         sasl_plain_password=password)


# ---- logging in as a client (inter-broker connections, the tools) ----

Login = tuple[str, str, str]  # (mechanism, username, password)


def _check_handshake(resp: Any, mechanism: str) -> None:
    if resp.error_code:
        raise AuthenticationFailed(
            f"the broker refused SASL mechanism {mechanism} (error {resp.error_code}); it "
            f"enables {', '.join(resp.mechanisms) or 'none'} on this listener")


def _check_step(resp: Any) -> bytes:
    if resp.error_code:
        raise AuthenticationFailed(resp.error_message or f"SASL login failed (error "
                                   f"{resp.error_code})")
    return bytes(resp.auth_bytes)


def login(call: Callable[[Any, int], Any], who: Login) -> int:
    """Log in over a connection whose `call(request, version)` sends a request and
    returns its decoded answer: SaslHandshake v1, then SaslAuthenticate v1 until the
    mechanism is done. The session lifetime the broker gave, in ms (0: none; see
    `relogin_at`). AuthenticationFailed with the broker's reason. Called again on the
    same connection, it is KIP-368's re-authentication."""
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    mechanism, user, password = who
    _check_handshake(call(SaslHandshakeRequest(mechanism=mechanism), 1), mechanism)
    client = client_mechanism(mechanism, user, password)
    lifetime = 0
    while not client.is_done():
        answer = call(SaslAuthenticateRequest(auth_bytes=client.auth_bytes()), 1)
        client.receive(_check_step(answer))
        lifetime = answer.session_lifetime_ms
    if not client.is_authenticated():
        raise AuthenticationFailed(f"the broker's answer to the {mechanism} login did not verify")
    return lifetime


def relogin_at(now: float, lifetime_ms: int) -> float | None:
    """When a connection whose login was given `lifetime_ms` (connections.max.reauth.ms)
    at `now` (seconds) logs in again, as Kafka's clients do: at 85-95% of the session,
    before the broker closes it (KIP-368); None for a session without end."""
    if lifetime_ms <= 0:
        return None
    return now + lifetime_ms / 1000 * random.uniform(0.85, 0.95)


def login_blocking(sock: Any, who: Login, *, client_id: str, peer: str) -> int:
    """`login` on a blocking socket (the controller's channel, a controlled shutdown's
    request): Kafka frames sent and read on `sock`, `peer` naming it in errors."""
    from ..api import protocol
    from ..wire import frames

    ids = iter(range(1, 1 << 31))

    def call(request: Any, version: int) -> Any:
        sock.sendall(protocol.encode_request(request, version, next(ids), client_id=client_id))
        payload = frames.recv_frame(sock, peer)
        return protocol.decode_response(protocol.SUPPORTED[request.API_KEY].response,
                                        payload, version)

    return login(call, who)


async def login_async(call: Callable[[Any, int], Any], who: Login) -> int:
    """`login` over an asyncio connection (`call` is a coroutine function)."""
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    mechanism, user, password = who
    _check_handshake(await call(SaslHandshakeRequest(mechanism=mechanism), 1), mechanism)
    client = client_mechanism(mechanism, user, password)
    lifetime = 0
    while not client.is_done():
        answer = await call(SaslAuthenticateRequest(auth_bytes=client.auth_bytes()), 1)
        client.receive(_check_step(answer))
        lifetime = answer.session_lifetime_ms
    if not client.is_authenticated():
        raise AuthenticationFailed(f"the broker's answer to the {mechanism} login did not verify")
    return lifetime


def client_login(props: Mapping[str, str]) -> Login | None:
    """A Kafka client's SASL login from its properties (sasl.mechanism, sasl.jaas.config
    with PlainLoginModule or ScramLoginModule); None without SASL. SaslError names the
    key."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return None
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mechanism not in MECHANISMS:
        raise SaslError(f"sasl.mechanism = {mechanism}: logkeeper serves "
                        f"{', '.join(MECHANISMS)}")
    text = props.get("sasl.jaas.config")
    if not text:
        raise SaslError(f"sasl.jaas.config: give the login, e.g. "
                        f"{PLAIN_MODULE if mechanism == PLAIN else SCRAM_MODULE} required "
                        'username="alice" password="alice-secret";')
    _module, _flag, options = parse_jaas(text)
    if not options.get("username") or "password" not in options:
        raise SaslError("sasl.jaas.config: needs username=\"...\" and password=\"...\"")
    return mechanism, options["username"], options["password"]
