"""Structured logs following the Kubernetes logging conventions.

Text lines look like klog's structured form (`I1121 10:00:00.000000 ... "message" key="value"`);
JSON lines carry `ts`, `v`, `level`, `logger`, `msg` and the record's extra keys, like
component-base's JSON format. Extras come from `logging`'s `extra=` argument.
"""

from __future__ import annotations

import json
import logging
import sys
import time

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
# Kopf attaches its whole OperatorSettings to each record of its object loggers (~1 KB of text).
_NOISE = frozenset({"settings"})
_LEVELS = {
    "trace": 5,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def _extras(record: logging.LogRecord) -> dict[str, object]:
    items = record.__dict__.items()
    return {
        k: v for k, v in items if k not in _STANDARD and k not in _NOISE and not k.startswith("_")
    }


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": round(record.created, 6),
            "v": 0 if record.levelno >= logging.INFO else 4,
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.levelno >= logging.ERROR and record.exc_info:
            entry["err"] = self.formatException(record.exc_info)
        entry.update(_extras(record))
        return json.dumps(entry, default=str)


class KlogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        head = f"{record.levelname[0]}{stamp}.{micros:06d} {record.process} {record.name}]"
        parts = [head, json.dumps(record.getMessage())]
        parts += [f"{k}={json.dumps(v, default=str)}" for k, v in _extras(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(fmt: str = "text", level: str = "info") -> None:
    """Send every log record to stderr in the chosen format; called once by the CLI."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KlogFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS.get(level, logging.INFO))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # Kopf logs "Handler ... succeeded" for every watch event of every Allocation, pod and
    # Event: thousands of lines a minute and about 6% of the operator's CPU when 500
    # allocations start at once. They stay available at debug.
    quiet = root.level > logging.DEBUG
    logging.getLogger("kopf.objects").setLevel(logging.WARNING if quiet else logging.NOTSET)
