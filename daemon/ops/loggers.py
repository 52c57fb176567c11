"""This broker's loggers as the BROKER_LOGGER config resource shows and changes them
(kafka-configs.sh --entity-type broker-loggers; Kafka's Log4jController and
RuntimeLoggerManager), on Python's logging instead of log4j.

Every logger the process has made (`logkeeper.*`, and the libraries' `kazoo.*`...) and
each parent of one (`logkeeper`) is listed with its effective level, "root" first;
Kafka's level names stand for Python's (WARN for WARNING, FATAL for CRITICAL, TRACE
below DEBUG). A change is checked whole before any of it is applied: SET needs a logger
that exists and one of Kafka's level names, DELETE a logger other than root (it then
takes its parent's level), and APPEND and SUBTRACT are refused, as Kafka refuses them.
Levels set live until the broker restarts, as Kafka's do.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..replica.topic_config import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT

ROOT = "root"
TRACE = 5  # log4j's TRACE, below Python's DEBUG
# Kafka's LogLevelConfig.VALID_LOG_LEVELS and the Python level each stands for.
LEVELS = {"FATAL": logging.CRITICAL, "ERROR": logging.ERROR, "WARN": logging.WARNING,
          "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": TRACE}
VALID_LEVELS = ", ".join(sorted(LEVELS))
logging.addLevelName(TRACE, "TRACE")

_OP_NAMES = {OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}


class LoggerChangeError(Exception):
    """A change refused, nothing applied; `invalid_config`: Kafka answers it
    INVALID_CONFIG (an unknown logger, a bad level), else INVALID_REQUEST."""

    def __init__(self, message: str, *, invalid_config: bool):
        super().__init__(message)
        self.invalid_config = invalid_config


def level_name(level: int) -> str:
    """Kafka's name of a Python level: the highest of Kafka's levels at or below it."""
    return next((n for n, v in sorted(LEVELS.items(), key=lambda kv: -kv[1]) if level >= v),
                "TRACE")


def _existing(name: str) -> logging.Logger | None:
    """The logger of that name, if the process has it or one below it ("logkeeper",
    the parent of every logkeeper.* logger, as log4j's "kafka" is Kafka's)."""
    if name == ROOT:
        return logging.getLogger()
    found = logging.Logger.manager.loggerDict.get(name)
    if isinstance(found, logging.PlaceHolder):
        return logging.getLogger(name)
    return found if isinstance(found, logging.Logger) else None


def loggers() -> dict[str, str]:
    """Each logger's effective level, root first, then by name (Kafka's
    Log4jController.loggers)."""
    out = {ROOT: level_name(logging.getLogger().getEffectiveLevel())}
    for name in sorted(logging.Logger.manager.loggerDict):
        found = _existing(name)
        if found is not None:
            out[name] = level_name(found.getEffectiveLevel())
    return out


def check(ops: Iterable[tuple[str, int, str | None]]) -> None:
    """LoggerChangeError for the first change of (logger, operation, level) Kafka's
    RuntimeLoggerManager.validateLogLevelConfigs refuses."""
    for name, op, value in ops:
        if op in _OP_NAMES:
            raise LoggerChangeError(f"{_OP_NAMES[op]} operation is not allowed for the "
                                    "BROKER_LOGGER resource", invalid_config=False)
        if op not in (OP_SET, OP_DELETE):
            raise LoggerChangeError(f"Unknown operation type {op} is not allowed for the "
                                    "BROKER_LOGGER resource", invalid_config=False)
        if _existing(name) is None:
            raise LoggerChangeError(f"Logger {name} does not exist!", invalid_config=True)
        if op == OP_SET and value not in LEVELS:
            raise LoggerChangeError(
                f"Cannot set the log level of {name} to {value} as it is not a supported "
                f"log level. Valid log levels are {VALID_LEVELS}", invalid_config=True)
        if op == OP_DELETE and name == ROOT:
            raise LoggerChangeError(f"Removing the log level of the {ROOT} logger is not "
                                    "allowed", invalid_config=False)


def apply(ops: Iterable[tuple[str, int, str | None]]) -> None:
    """Apply changes `check` passed: SET a level, DELETE the logger's own (it follows
    its parent's again)."""
    for name, op, value in ops:
        target = _existing(name)
        assert target is not None
        if op == OP_SET:
            assert value is not None
            target.setLevel(LEVELS[value])
            logging.getLogger("logkeeper.loggers").warning(
                "Updated the log level of %s to %s", name, value)
        else:
            target.setLevel(logging.NOTSET)
            logging.getLogger("logkeeper.loggers").warning("Unset the log level of %s", name)
