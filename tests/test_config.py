"""The daemon's TOML config: Kafka property names, Kafka's defaults, errors naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daemon import config
from daemon.config import ConfigError

REPO = Path(__file__).resolve().parents[1]


def load_text(tmp_path: Path, text: str) -> config.Config:
    path = tmp_path / "logkeeper.toml"
    path.write_text(text)
    return config.load(path)


def test_embedded_defaults_are_three_dirs_under_data_standalone_on_9092() -> None:
    cfg = config.load(None)
    assert cfg.log_dirs == ("./data/disk0", "./data/disk1", "./data/disk2")
    assert cfg.standalone
    assert (cfg.listener.host, cfg.listener.port) == ("127.0.0.1", 9092)
    # Kafka's own defaults
    assert cfg["log.segment.bytes"] == 1073741824
    assert cfg["log.retention.ms"] == 604800000
    assert cfg["log.retention.check.interval.ms"] == 300000
    assert cfg["message.max.bytes"] == 1048588
    assert cfg["socket.request.max.bytes"] == 104857600
    assert cfg["num.partitions"] == 1
    assert cfg["auto.create.topics.enable"] is True
    # keys the log-dir health work reads
    assert cfg["log.dir.reserve.bytes"] == 41943040
    assert cfg["log.dir.resume.free.bytes"] == 2 * 41943040
    assert cfg["log.dir.probe.interval.ms"] == 1000
    assert cfg["log.dir.probe.timeout.ms"] == 5000
    assert cfg["log.dir.slow.action"] == "report"


def test_dotted_quoted_and_table_forms_name_the_same_keys(tmp_path: Path) -> None:
    cfg = load_text(tmp_path, """
broker.id = 7
"message.max.bytes" = 2000000
log.dirs = ["/srv/a", "/srv/b"]
listeners = "PLAINTEXT://0.0.0.0:19092"
[log.retention]
ms = 1000
bytes = 5000
""")
    assert cfg.broker_id == 7
    assert cfg["message.max.bytes"] == 2000000
    assert cfg.log_dirs == ("/srv/a", "/srv/b")
    assert cfg["log.retention.ms"] == 1000 and cfg["log.retention.bytes"] == 5000
    assert (cfg.listener.host, cfg.listener.port) == ("0.0.0.0", 19092)
    lc = cfg.log_config()
    assert (lc.retention_ms, lc.retention_bytes, lc.max_message_bytes) == (1000, 5000, 2000000)


def test_kafka_style_comma_separated_log_dirs(tmp_path: Path) -> None:
    cfg = load_text(tmp_path, 'log.dirs = "/d1, /d2,/d3"\n')
    assert cfg.log_dirs == ("/d1", "/d2", "/d3")


def test_resume_mark_follows_the_reserve_unless_given(tmp_path: Path) -> None:
    assert load_text(tmp_path, "log.dir.reserve.bytes = 1000\n")[
        "log.dir.resume.free.bytes"] == 2000
    assert load_text(tmp_path, "log.dir.reserve.bytes = 1000\nlog.dir.resume.free.bytes = 5\n"
                     )["log.dir.resume.free.bytes"] == 5


@pytest.mark.parametrize("text, names", [
    ("brokers.id = 1\n", ["brokers.id", "broker.id"]),  # typo: suggests the real key
    ("foo = 1\n", ["foo"]),
    ("broker.id = \"one\"\n", ["broker.id", "integer"]),
    ("broker.id = -2\n", ["broker.id", ">= 0"]),
    ("log.segment.bytes = 10\n", ["log.segment.bytes", ">= 14"]),
    ("log.retention.ms = -5\n", ["log.retention.ms"]),
    ("num.partitions = 0\n", ["num.partitions"]),
    ("auto.create.topics.enable = \"maybe\"\n", ["auto.create.topics.enable"]),
    ("listeners = \"SSL://h:9093\"\n", ["listeners", "PLAINTEXT"]),
    ("listeners = \"PLAINTEXT://h:99999\"\n", ["listeners", "65535"]),
    ("listeners = \"PLAINTEXT://a:1,PLAINTEXT://b:2\"\n", ["listeners", "one"]),
    ("http.listen = \"9308\"\n", ["http.listen", "host:port"]),
    ("log.dirs = []\n", ["log.dirs"]),
    ("log.dirs = [\"/a\", \"/a\"]\n", ["log.dirs", "twice"]),
    ("log.dirs = [\"/a\", \"/a/b\"]\n", ["log.dirs", "nest"]),
    ("zookeeper.connect = \"no port\"\n", ["zookeeper.connect"]),
    ("log.dir.slow.action = \"panic\"\n", ["log.dir.slow.action", "report"]),
    ("message.max.bytes = 2000000\nsocket.request.max.bytes = 1000000\n",
     ["socket.request.max.bytes", "message.max.bytes"]),
    ("broker.id = 1\n\"broker.id\" = 2\n", ["broker.id", "twice"]),
    ("broker.id = [\n", ["TOML"]),
])
def test_bad_config_names_the_key(tmp_path: Path, text: str, names: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, text)
    message = str(info.value)
    assert str(tmp_path / "logkeeper.toml") in message
    for name in names:
        assert name in message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(tmp_path / "absent.toml")


def test_example_config_for_etc_is_valid() -> None:
    cfg = config.load(REPO / "systemd" / "logkeeper.toml")
    assert cfg.log_dirs == ("/data/disk0", "/data/disk1", "/data/disk2")
    assert cfg.standalone


def test_example_config_lists_every_known_key() -> None:
    text = (REPO / "systemd" / "logkeeper.toml").read_text()
    for key in config.KEYS:
        assert key in text, f"systemd/logkeeper.toml does not mention {key}"


def test_serve_refuses_a_bad_config_before_touching_anything(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(f'log.dirs = ["{tmp_path / "d0"}"]\nlog.segmnt.bytes = 100\n')
    proc = subprocess.run([sys.executable, "-m", "daemon.cli", "serve", "--config", str(bad)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "log.segmnt.bytes" in proc.stderr and "log.segment.bytes" in proc.stderr
    assert not (tmp_path / "d0").exists()


def test_serve_help_config_lists_keys() -> None:
    proc = subprocess.run([sys.executable, "-m", "daemon.cli", "serve", "--help-config"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for key in ("log.dirs", "http.listen", "log.dir.slow.action"):
        assert key in proc.stdout


# ---- every key, through the one Config API the daemon reads ----


def test_embedded_defaults() -> None:
    cfg = config.load(None)
    assert cfg.broker_id == 0 and cfg["zookeeper.connect"] is None and cfg.standalone
    assert cfg.log_dirs == ("./data/disk0", "./data/disk1", "./data/disk2")
    assert (cfg.listener.host, cfg.listener.port) == ("127.0.0.1", 9092)
    assert cfg.http_listen == ("127.0.0.1", 9308)
    assert cfg["log.retention.check.interval.ms"] == 300000
    assert cfg["message.max.bytes"] == 1048588 and cfg["socket.request.max.bytes"] == 104857600
    assert cfg["log.dir.reserve.bytes"] == 41943040
    assert cfg["log.dir.resume.free.bytes"] == 2 * 41943040
    assert cfg["log.dir.min.free.bytes"] == 0
    assert (cfg["log.dir.probe.interval.ms"], cfg["log.dir.probe.timeout.ms"]) == (1000, 5000)
    assert cfg["log.dir.slow.action"] == "report"


EVERY_KEY = """
broker.id = 42
log.dirs = "/srv/k/a,/srv/k/b"
listeners = "PLAINTEXT://[::1]:19093"
zookeeper.connect = "zk1:2181,zk2:2181/logkeeper"
zookeeper.session.timeout.ms = 6000
log.segment.bytes = 1048576
log.roll.ms = 3600000
log.retention.ms = -1
log.retention.bytes = 10000000
log.retention.check.interval.ms = 1000
log.index.interval.bytes = 8192
message.max.bytes = 2000000
num.partitions = 6
default.replication.factor = 3
auto.create.topics.enable = false
socket.request.max.bytes = 3000000
http.listen = "0.0.0.0:19308"
log.dir.reserve.bytes = 1000
log.dir.resume.free.bytes = 7000
log.dir.min.free.bytes = 500
log.dir.probe.interval.ms = 250
log.dir.probe.timeout.ms = 2000
log.dir.slow.action = "offline"
log.dir.slow.min.ms = 20
log.dir.slow.factor = 3
"""


def test_every_key_is_read(tmp_path: Path) -> None:
    path = tmp_path / "all.toml"
    path.write_text(EVERY_KEY)
    cfg = config.load(str(path))
    assert set(config.KEYS) <= {line.split(" =")[0] for line in EVERY_KEY.split("\n") if line}
    assert cfg.broker_id == 42
    assert cfg.log_dirs == ("/srv/k/a", "/srv/k/b")
    assert (cfg.listener.host, cfg.listener.port) == ("::1", 19093)
    assert cfg["zookeeper.connect"] == "zk1:2181,zk2:2181/logkeeper" and not cfg.standalone
    assert (cfg["num.partitions"], cfg["default.replication.factor"]) == (6, 3)
    assert cfg["auto.create.topics.enable"] is False
    assert cfg.http_listen == ("0.0.0.0", 19308)
    assert (cfg["log.dir.reserve.bytes"], cfg["log.dir.resume.free.bytes"]) == (1000, 7000)
    assert cfg["log.dir.min.free.bytes"] == 500
    assert (cfg["log.dir.probe.interval.ms"], cfg["log.dir.probe.timeout.ms"]) == (250, 2000)
    assert cfg["log.dir.slow.action"] == "offline"
    assert (cfg["log.dir.slow.min.ms"], cfg["log.dir.slow.factor"]) == (20, 3)
    assert cfg.source == str(path)
    lc = cfg.log_config()
    assert (lc.segment_bytes, lc.segment_ms, lc.retention_ms, lc.retention_bytes,
            lc.index_interval_bytes, lc.max_message_bytes) == (
        1048576, 3600000, -1, 10000000, 8192, 2000000)


def test_empty_http_listen_turns_the_endpoint_off(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('http.listen = ""\n')
    assert config.load(path).http_listen is None


def test_a_mapping_is_validated_like_a_file() -> None:
    cfg = config.from_mapping({"log.dirs": ["/t/a"], "log.dir.reserve.bytes": 10})
    assert cfg["log.dir.resume.free.bytes"] == 20
    with pytest.raises(ConfigError, match="num.partitions"):
        config.from_mapping({"num.partitions": 0})
    with pytest.raises(ConfigError, match="log.dir.slow.action"):
        config.from_mapping({"log.dir.slow.action": "panic"})
    with pytest.raises(ConfigError, match="listeners"):
        config.from_mapping({"listeners": "PLAINTEXT://127.0.0.1:70000"})
    # A resume mark at or under the floor would make a dir flap.
    with pytest.raises(ConfigError, match="log.dir.resume.free.bytes"):
        config.from_mapping({"log.dir.min.free.bytes": 100, "log.dir.resume.free.bytes": 100})


def test_load_config_errors_name_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('listeners = "PLAINTEXT://nohost"\n')
    with pytest.raises(ConfigError) as info:
        config.load(str(path))
    assert str(path) in str(info.value) and "listeners" in str(info.value)
