"""Metrics and the /metrics + /healthz endpoint, scraped over real loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon.ops.metrics import Metrics
from daemon.tools.zookeeper import free_port


def fetch(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def scrape(port: int, path: str) -> tuple[int, str, str]:
    """GET from a thread, so the endpoint on this test's event loop can answer."""
    return asyncio.get_running_loop().run_in_executor(None, fetch, port, path)  # type: ignore[return-value]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def record_everything(m: Metrics) -> None:
    m.observe_request("Produce", 8, 100, 0.0007)
    m.observe_request("Produce", 7, 50, 0.2)
    m.observe_request("Fetch", 11, 80, 0.003)
    m.bytes_in("orders", 1000)
    m.bytes_in("orders", 24)
    m.bytes_out("orders", 512)
    m.messages_in("orders", 10)
    m.set_log_dir("/d/a", 4096, 10**9, 3)
    m.set_log_dir("/d/b", 0, 5, 0)
    m.set_log_dir_state("/d/a", "online")
    m.set_log_dir_state("/d/b", "saturated")
    m.set_log_dir_state("/d/b", "offline")  # the latest state wins
    m.set_offline_counts(dirs=1, replicas=4, saturated=0)
    m.observe_probe("/d/a", 0.002)
    m.set_degraded("/d/a", True)


def test_recorded_values_appear_in_the_exposition() -> None:
    m = Metrics()
    record_everything(m)
    got = samples(m.render().decode())
    assert got[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "orders"),))] == 1024
    assert got[("kafka_server_brokertopicmetrics_bytesout_total", (("topic", "orders"),))] == 512
    assert got[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "orders"),))] == 10
    hist = "kafka_network_requestmetrics_total_time_seconds"
    assert got[(hist + "_count", (("request", "Produce"),))] == 2
    assert got[(hist + "_bucket", (("le", "0.001"), ("request", "Produce")))] == 1
    assert got[(hist + "_count", (("request", "Fetch"),))] == 1
    requests = "kafka_network_requestmetrics_requests_total"
    assert got[(requests, (("request", "Produce"), ("version", "8")))] == 1
    assert got[(requests, (("request", "Produce"), ("version", "7")))] == 1
    assert got[("kafka_network_requestmetrics_request_bytes_total",
                (("request", "Produce"),))] == 150
    assert got[("kafka_log_logdir_size_bytes", (("log_dir", "/d/a"),))] == 4096
    assert got[("kafka_log_logdir_free_bytes", (("log_dir", "/d/a"),))] == 10**9
    assert got[("kafka_log_logdir_partition_count", (("log_dir", "/d/a"),))] == 3
    state = {(dict(k[1])["log_dir"], dict(k[1])["state"]): v for k, v in got.items()
             if k[0] == "logkeeper_log_dir_state"}
    assert state == {("/d/a", "online"): 1, ("/d/a", "saturated"): 0, ("/d/a", "offline"): 0,
                     ("/d/b", "online"): 0, ("/d/b", "saturated"): 0, ("/d/b", "offline"): 1}
    assert got[("kafka_log_logmanager_logdirectoryoffline", (("logDirectory", "/d/b"),))] == 1
    assert got[("kafka_log_logmanager_logdirectoryoffline", (("logDirectory", "/d/a"),))] == 0
    assert got[("kafka_log_logmanager_offlinelogdirectorycount", ())] == 1
    assert got[("kafka_server_replicamanager_offlinereplicacount", ())] == 4
    assert got[("logkeeper_saturated_log_dir_count", ())] == 0
    assert got[("logkeeper_log_dir_probe_latency_seconds_count", (("log_dir", "/d/a"),))] == 1
    assert got[("logkeeper_log_dir_degraded", (("log_dir", "/d/a"),))] == 1
    m.set_degraded("/d/a", False)
    m.set_log_dir_state("/d/a", "offline")  # what was read of it is no longer known
    got = samples(m.render().decode())
    assert ("kafka_log_logdir_size_bytes", (("log_dir", "/d/a"),)) not in got
    assert ("kafka_log_logdir_free_bytes", (("log_dir", "/d/a"),)) not in got
    assert got[("kafka_log_logdir_partition_count", (("log_dir", "/d/a"),))] == 3
    assert samples(m.render().decode())[("logkeeper_log_dir_degraded", (("log_dir", "/d/a"),))] == 0


def test_request_times_fall_in_the_buckets_prometheus_would_put_them_in() -> None:
    """The request metrics are kept as plain numbers and exposed when scraped
    (metrics.RequestMetrics): a time on a bucket's bound counts in that bucket (le), one
    past the last bound only in +Inf, and the sums, counts and `_created` samples are
    those a prometheus_client Histogram and Counter give."""
    m = Metrics()
    for seconds in (0.001, 0.0010001, 45.0):
        m.observe_request("Metadata", 12, 40, seconds)
    m.observe_request("Fetch", 11, 100, 0.0004, from_follower=True)
    text = m.render().decode()
    got = samples(text)
    hist = "kafka_network_requestmetrics_total_time_seconds"
    bucket = {dict(k[1])["le"]: v for k, v in got.items()
              if k[0] == hist + "_bucket" and dict(k[1])["request"] == "Metadata"}
    assert bucket["0.0005"] == 0 and bucket["0.001"] == 1 and bucket["0.0025"] == 2
    assert bucket["30.0"] == 2 and bucket["+Inf"] == 3
    assert got[(hist + "_count", (("request", "Metadata"),))] == 3
    assert got[(hist + "_sum", (("request", "Metadata"),))] == pytest.approx(45.0020001)
    assert got[("kafka_network_requestmetrics_request_bytes_total",
                (("request", "Metadata"),))] == 120
    # A follower's Fetch counts under Fetch and FetchFollower, as Kafka's RequestMetrics.
    for name in ("Fetch", "FetchFollower"):
        assert got[(hist + "_bucket", (("le", "0.0005"), ("request", name)))] == 1
        assert got[("kafka_network_requestmetrics_requests_total",
                    (("request", name), ("version", "11")))] == 1
    assert ("kafka_network_requestmetrics_requests_total",
            (("request", "FetchConsumer"), ("version", "11"))) not in got
    for created in (hist + "_created", "kafka_network_requestmetrics_requests_created",
                    "kafka_network_requestmetrics_request_bytes_created"):
        assert f"# TYPE {created} gauge" in text


def test_broker_topic_metrics_have_the_names_the_jmx_exporter_gives_kafkas() -> None:
    """The Prometheus JMX exporter's Kafka config turns `kafka.server:type=
    BrokerTopicMetrics,name=BytesInPerSec,topic=T` (Count) into
    `kafka_server_brokertopicmetrics_bytesin_total{topic="T"}`: the bean's name less
    PerSec, lowercased, nothing between its words. Dashboards query those names; these
    were bytes_in_total and the like, which no Kafka dashboard finds."""
    m = Metrics()
    m.bytes_in("orders", 100)
    m.bytes_out("orders", 50)
    m.messages_in("orders", 2)
    m.replication_bytes_in.inc(10)
    m.replication_bytes_out.inc(20)
    m.failed_produce.labels("56").inc()
    m.failed_fetch.labels("56").inc()
    names = {name for name, _ in samples(m.render().decode())
             if name.startswith("kafka_server_brokertopicmetrics_")
             and not name.endswith("_created")}
    assert names == {"kafka_server_brokertopicmetrics_" + n + "_total" for n in (
        "bytesin", "bytesout", "messagesin", "replicationbytesin", "replicationbytesout",
        "failedproducerequests", "failedfetchrequests")}


def test_each_metrics_object_has_its_own_registry() -> None:
    a, b = Metrics(), Metrics()
    a.bytes_in("t", 5)
    assert "bytesin_total{topic=\"t\"}" not in b.render().decode()


def test_serve_answers_metrics_and_healthz_over_http() -> None:
    async def main() -> None:
        m = Metrics()
        record_everything(m)
        port = free_port()
        host, bound = await m.serve("127.0.0.1", port)
        assert (host, bound) == ("127.0.0.1", port)
        try:
            code, ctype, text = await scrape(port, "/metrics")
            assert code == 200 and ctype.startswith("text/plain")
            assert samples(text)[("kafka_server_replicamanager_offlinereplicacount", ())] == 4

            detail: dict[str, Any] = {"status": "serving", "log_dirs": {"/d/a": "online"}}
            healthy = [True]
            m.health_fn = lambda: (healthy[0], detail)
            code, ctype, text = await scrape(port, "/healthz")
            assert (code, ctype) == (200, "application/json") and json.loads(text) == detail
            healthy[0] = False
            code, _, text = await scrape(port, "/healthz")
            assert code == 503 and json.loads(text) == detail

            def broken() -> tuple[bool, dict[str, Any]]:
                raise RuntimeError("no dirs yet")

            m.health_fn = broken
            code, _, text = await scrape(port, "/healthz")
            assert code == 503 and "no dirs yet" in json.loads(text)["error"]
            assert (await scrape(port, "/nope"))[0] == 404
        finally:
            await m.close()
        with pytest.raises(OSError):  # closed: nothing listens any more
            socket.create_connection(("127.0.0.1", port), timeout=2).close()

    asyncio.run(main())


def test_port_zero_picks_a_free_port_and_default_health_is_ok() -> None:
    async def main() -> None:
        m = Metrics()
        _, port = await m.serve("127.0.0.1", 0)
        try:
            code, _, text = await scrape(port, "/healthz")
            assert code == 200 and json.loads(text)["status"] == "serving"
            m.health_fn = lambda: (True, {"log_dir": Path("/d/a")})  # not JSON by itself
            code, _, text = await scrape(port, "/healthz")
            assert code == 200 and json.loads(text) == {"log_dir": "/d/a"}
        finally:
            await m.close()

    asyncio.run(main())


def test_a_busy_port_raises_oserror() -> None:
    async def main() -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            m = Metrics()
            with pytest.raises(OSError):
                await m.serve("127.0.0.1", s.getsockname()[1])
            await m.close()  # nothing to close: must not raise

    asyncio.run(main())


def test_crc32c_implementation_is_read_at_scrape_time() -> None:
    import native

    m = Metrics()
    key = ("logkeeper_crc32c_implementation", (("impl", native.crc32c_active()),))
    assert samples(m.render().decode())[key] == 1
    native.crc32c_force("portable")
    try:
        got = samples(m.render().decode())
        assert got[("logkeeper_crc32c_implementation", (("impl", "portable"),))] == 1
        assert [k for k in got if k[0] == "logkeeper_crc32c_implementation"] == [
            ("logkeeper_crc32c_implementation", (("impl", "portable"),))]
    finally:
        native.crc32c_force(None)
