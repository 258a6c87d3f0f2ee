"""Structured log lines: klog-style text and component-base-style JSON."""

from __future__ import annotations

import json
import logging

from allocbridge.logs import JsonFormatter, KlogFormatter, configure


def record(**extra: object) -> logging.LogRecord:
    item = logging.makeLogRecord(
        {
            "name": "allocbridge.test",
            "msg": "hello %s",
            "args": ("you",),
            "levelno": logging.INFO,
            "levelname": "INFO",
        }
    )
    item.__dict__.update(extra)
    return item


def test_json_line_carries_message_level_and_extras() -> None:
    line = json.loads(JsonFormatter().format(record(pod="web-0", settings="x" * 1000)))
    assert line["msg"] == "hello you" and line["level"] == "info" and line["v"] == 0
    assert line["logger"] == "allocbridge.test" and line["pod"] == "web-0"
    assert "settings" not in line  # Kopf's settings object is noise


def test_klog_line_shape() -> None:
    line = KlogFormatter().format(record(pod="web-0"))
    assert line.startswith("I") and ' allocbridge.test] "hello you" pod="web-0"' in line


def test_kopf_per_handler_lines_only_at_debug() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure(level="info")
        assert not logging.getLogger("kopf.objects").isEnabledFor(logging.INFO)
        assert logging.getLogger("kopf.objects").isEnabledFor(logging.WARNING)
        assert logging.getLogger("kopf.activities").isEnabledFor(logging.INFO)
        configure(level="debug")
        assert logging.getLogger("kopf.objects").isEnabledFor(logging.DEBUG)
    finally:
        root.handlers[:], root.level = saved
        logging.getLogger("kopf.objects").setLevel(logging.NOTSET)
