"""The logkeeper service: config, log-dir states, Kafka protocol, ZooKeeper, metrics."""

import importlib.metadata


def version() -> str:
    """logkeeper's version as installed (`make run` installs it into the venv), or
    "unknown" for a checkout run without being installed."""
    try:
        return importlib.metadata.version("logkeeper")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
