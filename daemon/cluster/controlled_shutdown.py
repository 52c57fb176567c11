"""A broker's side of Kafka's controlled shutdown (KafkaServer.controlledShutdown): before
it stops serving, the broker asks the controller to move the leadership of its
partitions to other in-sync replicas and to take it out of the ISRs it is in, so its
stop leaves no partition without a leader and its clients' next requests go straight
to the new leaders. The controller's side is `Controller.controlled_shutdown`.

`run` asks up to `controlled.shutdown.max.retries` times, `controlled.shutdown.retry.
backoff.ms` apart, while the controller answers an error or partitions it could not
move yet (no other live in-sync replica); then the broker stops anyway, and the
controller handles the rest as a broker failure once its registration is gone. With no
other live broker nothing can move, and it does not ask again. `ask` sends one request
to a controller on another broker (v3, over a blocking socket).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable

from ..api import protocol
from ..security import sasl, tls
from ..wire import ControlledShutdownRequest, ControlledShutdownResponse, frames

log = logging.getLogger("logkeeper.cluster")

VERSION = 3
# (error code, partitions still led here as (topic, partition)), or None when no
# controller could be asked (the reason logged by the caller).
Answer = tuple[int, list[tuple[str, int]]]


def ask(host: str, port: int, broker_id: int, broker_epoch: int, *,
        timeout: float, tls_context: ssl.SSLContext | None = None,
        login: tuple[str, str, str] | None = None) -> Answer:
    """One ControlledShutdown request to the controller at host:port (over TLS with
    `tls_context`: an SSL inter-broker listener). OSError, ValueError or
    protocol.ProtocolError when it cannot be asked or answers garbage."""
    with tls.connect(host, port, timeout=timeout, context=tls_context) as sock:
        sock.settimeout(timeout)
        if login is not None:
            try:
                sasl.login_blocking(sock, login, client_id=f"broker-{broker_id}",
                                    peer=f"the controller at {host}:{port}")
            except sasl.AuthenticationFailed as err:
                raise OSError(f"SASL login as {login[1]} failed: {err}") from err
        req = ControlledShutdownRequest(version=VERSION, broker_id=broker_id,
                                        broker_epoch=broker_epoch)
        sock.sendall(protocol.encode_request(req, VERSION, 1, client_id=f"broker-{broker_id}"))
        payload = frames.recv_frame(sock, f"the controller at {host}:{port}")
    resp = protocol.decode_response(ControlledShutdownResponse, payload, VERSION)
    return resp.error_code, [(p.topic_name, p.partition_index) for p in resp.remaining_partitions]


async def run(attempt: Callable[[], Awaitable[Answer | str]], *, retries: int, backoff: float,
              others_live: Callable[[], bool]) -> bool:
    """Ask the controller (`attempt`: its answer, or why it could not be asked) until it
    has moved everything; whether it did."""
    started = time.monotonic()
    for n in range(1, max(retries, 1) + 1):
        got = await attempt()
        if isinstance(got, str):
            why = got
        else:
            code, remaining = got
            if code == 0 and not remaining:
                log.info("controlled shutdown succeeded in %.2f s: this broker leads no "
                         "partition another replica could lead", time.monotonic() - started)
                return True
            why = (f"the controller answered error {code}" if code else
                   f"{len(remaining)} partitions still led here (no other live in-sync "
                   f"replica yet): {', '.join(f'{t}-{p}' for t, p in remaining[:10])}"
                   f"{' ...' if len(remaining) > 10 else ''}")
        if not others_live():
            log.info("controlled shutdown: %s, and no other broker is live to take them; "
                     "stopping", why)
            return False
        if n < retries:
            log.info("controlled shutdown attempt %d of %d: %s; asking again in %.1f s", n,
                     retries, why, backoff)
            await asyncio.sleep(backoff)
        else:
            log.warning("controlled shutdown did not complete after %d attempts (%s); stopping "
                        "anyway: the controller elects new leaders once this broker's "
                        "registration is gone", retries, why)
    return False
