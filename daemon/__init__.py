"""The logkeeper service: config, log-dir states, Kafka protocol, ZooKeeper, metrics."""


def version() -> str:
    """logkeeper's version as installed (`make run` installs it into the venv), or
    "unknown" for a checkout run without being installed."""
    import importlib.metadata  # only when asked: every `logkeeper` command imports us

    try:
        return importlib.metadata.version("logkeeper")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
