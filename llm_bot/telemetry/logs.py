"""JSON log lines that Cloud Logging understands, carrying the ids of the event at hand.

Each line has ``severity``, ``message``, ``time``, ``logger``, the trace as
``logging.googleapis.com/trace`` (so Cloud Logging links the line to its trace) and the
``correlationId``/``userId``/``threadId`` of the event being handled, plus any ``extra=``
fields. Known secrets (the API key, the database password) are masked wherever they appear;
message and memory content is only ever logged at debug level by our code.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

_EVENT_IDS: ContextVar[dict[str, str]] = ContextVar("llm_bot_event_ids", default={})  # noqa: B039
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
MASK = "[REDACTED]"


@contextlib.contextmanager
def event_ids(**ids: str) -> Iterator[None]:
    """Tag every line logged inside the block (in this task) with these ids."""
    token = _EVENT_IDS.set({**_EVENT_IDS.get(), **{k: v for k, v in ids.items() if v}})
    try:
        yield
    finally:
        _EVENT_IDS.reset(token)


class JsonFormatter(logging.Formatter):
    def __init__(self, project: str, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._project = project
        self._secrets = [s for s in secrets if s and len(s) >= 6]

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "severity": record.levelname,
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "logger": record.name,
            **_EVENT_IDS.get(),
        }
        line.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            line["logging.googleapis.com/trace"] = (
                f"projects/{self._project}/traces/{span.trace_id:032x}"
            )
            line["logging.googleapis.com/spanId"] = f"{span.span_id:016x}"
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return self._redact(json.dumps(line, default=str, ensure_ascii=False))

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text


# Libraries that log a request's URL at INFO: the tool-gateway's may carry its token
# (``?token=``) and the model endpoint's its path; their warnings and errors still show.
QUIET_LOGGERS = ("httpx", "httpcore", "mcp.client.sse", "mcp.client.streamable_http")


def configure_json_logging(level: str, project: str, secrets: Iterable[str] = ()) -> None:
    """Replace the root handlers with one JSON-lines handler on stdout."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter(project, secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
