"""A small blocking Kafka-protocol client for the admin commands.

It speaks to any Kafka-protocol broker (this daemon or Apache Kafka): it asks
ApiVersions first and uses the highest version both sides support, encoding and
decoding with kafka-python's schema classes directly. It does not import the daemon's
own codec (daemon.api.protocol), so the admin commands test the server from outside.

Errors: a broker that cannot be reached, closes the connection or answers with bytes
that do not decode raises `ClientError` naming the broker address and the API.
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)

from ..api.errors import NOT_CONTROLLER, name_of
from ..wire import frames

T = TypeVar("T")


class ClientError(Exception):
    """A broker that cannot be reached or answered nonsense; names the address and API."""


class ControllerUnavailable(ClientError):
    """The bootstrap server answered, but the controller it names cannot be reached (or
    there is none): it may have just died, with a new one elected within the ZooKeeper
    session timeout."""


class Refused(Exception):
    """The broker answered the request with an error code: nothing was done."""

    def __init__(self, code: int, message: str | None):
        super().__init__(f"error {code} ({name_of(code)}): "
                         f"{(message or '').rstrip('.') or 'no message'}")
        self.code = code


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api {api_key}"


# The admin command's TLS when the listener it reaches is SSL (`use_tls`): every
# Connection of the command's process speaks it.
_tls_context: ssl.SSLContext | None = None
# ... and its SASL login (mechanism, username, password), when the listener is SASL.
_login: tuple[str, str, str] | None = None


def _sasl_response(request: Any) -> Any:
    from kafka.protocol.sasl import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeResponse,
    )

    return SaslAuthenticateResponse if isinstance(request, SaslAuthenticateRequest) \
        else SaslHandshakeResponse


def use_tls(context: ssl.SSLContext | None) -> None:
    """Connect over TLS with `context` from now on (None: plain Kafka)."""
    global _tls_context
    _tls_context = context


def use_login(login: tuple[str, str, str] | None) -> None:
    """Log in with SASL as `login` on every connection from now on (None: no SASL)."""
    global _login
    _login = login


class Connection:
    def __init__(self, host: str, port: int, *, timeout: float = 10.0):
        self.address = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as err:
            raise ClientError(f"cannot connect to {self.address}: {err.strerror or err}") from err
        if _tls_context is not None:
            try:
                self.sock = _tls_context.wrap_socket(self.sock, server_hostname=host)
            except (ssl.SSLError, OSError) as err:
                self.sock.close()
                raise ClientError(f"cannot connect to {self.address} over TLS: "
                                  f"{getattr(err, 'reason', None) or err}") from err
        self._correlation = 0
        self.node_id = -1  # the broker's id, where the caller learnt it (FindCoordinator)
        self.versions: dict[int, tuple[int, int]] = {}
        resp = self._call(ApiVersionsRequest(), ApiVersionsResponse, 0)
        if resp.error_code:
            raise ClientError(f"{self.address}: ApiVersions failed with error {resp.error_code}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        if _login is not None:
            from ..security import sasl

            try:
                sasl.login(lambda req, v: self._call(req, _sasl_response(req), v), _login)
            except sasl.AuthenticationFailed as err:
                self.close()
                raise ClientError(f"{self.address}: SASL login as {_login[1]} with "
                                  f"{_login[0]} failed: {err}") from err

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version_for(self, api_key: int, lo: int, hi: int) -> int:
        broker = self.versions.get(api_key)
        name = _api_name(api_key)
        if broker is None:
            raise ClientError(f"{self.address} does not serve {name}")
        v = min(hi, broker[1])
        if v < max(lo, broker[0]):
            raise ClientError(f"{self.address} serves {name} v{broker[0]}-{broker[1]}, this "
                              f"client v{lo}-{hi}")
        return v

    def call(self, body: Any, response_cls: Any, *, lo: int = 0, hi: int | None = None) -> Any:
        """Send `body` at the best common version (at most `hi`) and decode the answer."""
        hi = response_cls.max_version if hi is None else hi
        version = self.version_for(body.API_KEY, lo, hi)
        return self._call(body, response_cls, version)

    def _call(self, body: Any, response_cls: Any, version: int) -> Any:
        self._correlation += 1
        body.API_VERSION = version
        body.with_header(correlation_id=self._correlation, client_id="logkeeper-admin")
        frame = bytes(body.encode(header=True, framed=True))
        try:
            self.sock.sendall(frame)
            payload = frames.recv_frame(self.sock, self.address)
        except (OSError, ValueError) as err:
            raise ClientError(f"{self.address}: {body.name} failed: {err}") from err
        try:
            resp = response_cls.decode(payload, version=version, header=True)
        except Exception as err:  # noqa: BLE001 - the decoder raises many types on bad bytes
            raise ClientError(f"{self.address}: {body.name} v{version} answer does not "
                              f"decode: {type(err).__name__}: {err}") from err
        if resp.header.correlation_id != self._correlation:
            raise ClientError(f"{self.address}: {body.name} answer has correlation id "
                              f"{resp.header.correlation_id}, expected {self._correlation}")
        return resp


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` -> [(host, port)]; ValueError naming the bad entry."""
    from ..config import parse_host_port

    out = []
    for item in value.split(","):
        host, port = parse_host_port(item.strip())
        out.append((host or "localhost", port))
    if not out:
        raise ValueError("no bootstrap server given")
    return out


def connect_any(bootstrap: str, *, timeout: float = 10.0) -> Connection:
    errors = []
    for host, port in parse_bootstrap(bootstrap):
        try:
            return Connection(host, port, timeout=timeout)
        except ClientError as err:
            errors.append(str(err))
    raise ClientError("; ".join(errors))


CONTROLLER = -1


def connect_broker(bootstrap: str, broker_id: int, *, timeout: float = 10.0) -> Connection:
    """A connection to broker `broker_id`, or with CONTROLLER to the cluster's active
    controller (where Kafka's admin clients send CreateTopics, DeleteTopics and
    CreatePartitions; a standalone broker is its own), found through the Metadata of
    any bootstrap server."""
    with connect_any(bootstrap, timeout=timeout) as conn:
        meta = metadata(conn, [])
    wanted = meta.controller_id if broker_id == CONTROLLER else broker_id
    if broker_id == CONTROLLER and wanted < 0:
        raise ControllerUnavailable(
            f"{conn.address}: the cluster has no active controller right now (one is "
            "elected within the ZooKeeper session timeout); try again")
    for b in meta.brokers:
        if b.node_id == wanted:
            if broker_id != CONTROLLER:
                return Connection(b.host, b.port, timeout=timeout)
            try:
                return Connection(b.host, b.port, timeout=timeout)
            except ClientError as err:
                raise ControllerUnavailable(f"the controller, broker {wanted}: {err}") from err
    what = "the controller" if broker_id == CONTROLLER else "broker"
    raise ClientError(f"{what} {wanted} is not in the cluster's metadata (brokers "
                      f"{sorted(b.node_id for b in meta.brokers)})")


def metadata(conn: Connection, topics: list[str] | None) -> Any:
    """Metadata of `topics` (None: every topic; []: none, only brokers and controller)."""
    req = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t)
                                       for t in topics]
    return conn.call(MetadataRequest(topics=req, allow_auto_topic_creation=False),
                     MetadataResponse, lo=1, hi=12)


# A controller that moved between our Metadata and the request answers NOT_CONTROLLER:
# asked again (at the new one) this many times, as Kafka's admin clients retry.
CONTROLLER_TRIES = 3
# How long before looking up a controller that could not be reached again (seconds).
CONTROLLER_RETRY_S = 0.5


def at_controller(bootstrap: str, timeout_ms: int, send: Callable[[Connection], T], *,
                  socket_timeout: float | None = None) -> T:
    """`send(conn)` at the active controller; its answer (a tuple whose first item is
    the error code) is asked again at the new controller when the controller moved
    meanwhile (NOT_CONTROLLER). A controller that cannot be reached, or none at all (a
    killed one is listed until its ZooKeeper session expires), is looked up again until
    timeout_ms has passed, as Kafka's admin clients retry until their API timeout. The
    socket waits `socket_timeout`, by default longer than the broker may hold the answer
    (timeout_ms)."""
    tries = 0
    wait = timeout_ms / 1000 + 10 if socket_timeout is None else socket_timeout
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            conn = connect_broker(bootstrap, CONTROLLER, timeout=wait)
        except ControllerUnavailable as err:
            if time.monotonic() >= deadline:
                raise ClientError(f"{err} (still, after {timeout_ms} ms)") from err
            time.sleep(CONTROLLER_RETRY_S)
            continue
        with conn:
            answer = send(conn)
        tries += 1
        if answer[0] != NOT_CONTROLLER or tries == CONTROLLER_TRIES:  # type: ignore[index]
            return answer
        time.sleep(0.5 * tries)


def run_tool(prog: str, parser: argparse.ArgumentParser, argv: list[str],
             body: Callable[[argparse.Namespace], int]) -> int:
    """An admin command's `main`: `argv` parsed (argparse's own exit for --help and usage
    errors), then `body(args)`, its exit code. On stderr after `logkeeper <prog>:`, a
    broker that cannot be reached, a bad file or config (ClientError, ValueError) exits
    2; a broker's refusal (Refused) 1, nothing changed."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return body(args)
    except Refused as err:
        print(f"logkeeper {prog}: {err}; nothing changed", file=sys.stderr)
        return 1
    except (ClientError, ValueError) as err:  # ConfigError is a ValueError
        print(f"logkeeper {prog}: {err}", file=sys.stderr)
        return 2


def add_zookeeper_tls_option(parser: argparse.ArgumentParser) -> None:
    """Kafka's tools' --zk-tls-config-file, beside their --zookeeper."""
    parser.add_argument("--zk-tls-config-file", metavar="FILE",
                        help="with --zookeeper: Kafka's zookeeper.ssl.* keys for reaching "
                        "ZooKeeper over TLS (zookeeper.ssl.client.enable=true)")


def zookeeper_tls_option(args: argparse.Namespace, hosts: str | None) -> str | None:
    """--zk-tls-config-file's file; ValueError when it is given without --zookeeper."""
    if args.zk_tls_config_file is not None and not hosts:
        raise ValueError("--zk-tls-config-file goes with --zookeeper")
    return args.zk_tls_config_file


@contextmanager
def zookeeper_session(hosts: str, tls_config: str | None = None) -> Iterator[Any]:
    """A kazoo client connected to `hosts` (a tool that writes ZooKeeper directly, as
    Kafka's tools' --zookeeper), over TLS when `tls_config` (--zk-tls-config-file, a
    properties file of zookeeper.ssl.* keys) enables it; ClientError when it cannot be
    reached in 15 s."""
    from .. import config as config_mod
    from ..cluster import zk_client

    settings = None
    if tls_config is not None:
        from .console import load_properties

        props = load_properties(tls_config, "--zk-tls-config-file")
        settings = config_mod.zookeeper_client_tls(props, tls_config)
    # As Kafka's tools: a certificate to log in to ZooKeeper with means secure znode ACLs.
    zk = zk_client.new_client(hosts, timeout=10, tls_context=None if settings is None
                              else settings.client_context(),
                              secure_acls=settings is not None and settings.chain_pem is not None)
    try:
        zk_client.start(zk, 15)
    except Exception as err:  # noqa: BLE001 - kazoo's timeout
        raise ClientError(f"cannot reach ZooKeeper at {hosts}: {err}") from err
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def read_json_option(option: str, path: str, fmt: str) -> Any:
    """The JSON document of the file `option` names (Kafka's tools' plan and election
    files); ValueError naming the option, the file and what is wrong, with the format
    expected when it is not JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{option} {path}: {getattr(err, 'strerror', None) or err}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{option} {path}: not JSON ({err}); the format is {fmt}") from None


def add_command(sub: Any, name: str, help_: str) -> argparse.ArgumentParser:
    """A subcommand of an admin command (`sub`: argparse's subparsers), with the broker
    it asks: `--bootstrap-server`, or `--config FILE` (see `bootstrap_of`)."""
    return add_broker_options(sub.add_parser(name, help=help_))


def add_broker_options(parser: argparse.ArgumentParser, *,
                       command_config: bool = True) -> argparse.ArgumentParser:
    """`--bootstrap-server`, or `--config FILE`: the broker an admin command asks; and
    (unless the command has its own client config file) Kafka's `--command-config FILE`:
    client properties, security.protocol=SSL and the ssl.* keys to reach an SSL
    listener."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]",
                       help="default: the listener of --config, or of the embedded defaults")
    where.add_argument("--config", metavar="FILE",
                       help="the daemon's config, to find its listener")
    if command_config:
        parser.add_argument("--command-config", metavar="FILE",
                            help="Kafka client properties: security.protocol=SSL with "
                            "ssl.truststore.location (and ssl.keystore.location where the "
                            "listener requires client certificates)")
    return parser


def bootstrap_of(args: argparse.Namespace) -> str:
    """`--bootstrap-server`, else the Kafka listener of the daemon on this host: that of
    `--config FILE`, or of the embedded defaults (127.0.0.1:9092). Connections speak TLS
    and log in as `--command-config` says, or, for the daemon's own listener, as that
    listener does (its keystore and truststore; the broker's own login from its JAAS
    config). ConfigError (a ValueError) for a bad config file."""
    from .. import config as config_mod

    command_config = getattr(args, "command_config", None)
    if command_config is not None:
        from .console import load_properties

        props = load_properties(command_config, "--command-config")
        settings = config_mod.client_tls(props, command_config)
        use_tls(settings.client_context() if settings is not None else None)
        use_login(config_mod.client_login(props, command_config))
    if args.bootstrap_server is not None:
        return str(args.bootstrap_server)
    cfg = config_mod.load(args.config)
    own = cfg.tls.get(cfg.listener.name)
    if own is not None and command_config is None:
        use_tls(own.client_context())
    own_sasl = cfg.sasl.get(cfg.listener.name)
    if own_sasl is not None and command_config is None and own_sasl.logins:
        # The broker's own login on that listener (its JAAS username and password).
        mechanism = cfg["sasl.mechanism.inter.broker.protocol"]
        if mechanism not in own_sasl.logins:
            mechanism = next(iter(own_sasl.logins))
        use_login((mechanism, *own_sasl.logins[mechanism]))
    return config_mod.local_address(cfg.listener.host, cfg.listener.port)
