"""Log setup for the CLI: text or JSON lines, with credentials masked in every record.

JSON lines (``--log-format json``) are for log shippers: one object per record with ``time``
(UTC, ISO 8601), ``level``, ``logger``, ``message`` and every ``extra=`` field the code passed
(``changefeed``, ``position``, ``table``, ``checkpoint_ts``...), so a dashboard can filter on them
without parsing the message.

`SecretFilter` sits on the handler, so it sees records of every logger (a filter on a logger
would miss records propagated from its children). It masks ``scheme://user:PASSWORD@`` in the
message, its arguments, ``extra`` values and exception text, and ``password=...`` style fields,
and replaces the value of any ``extra`` key that names a secret (one vocabulary with the text
masking: `changefeed.secrets.SECRET_WORDS`). Sinks already mask URLs they
log; this is the net under code that forgets. The masking is `changefeed.secrets.mask_secrets`,
the one function every part (and the CLI's error exit) uses; it is re-exported here.

`ContextFilter` (also on the handler) adds the fields bound with `log_context` (``changefeed``,
``job``, ``batch``, ``position``...) to every record that does not set them itself, so a record from
deep inside a sink still says which changefeed and position it belongs to. The context is a
`contextvars.ContextVar`: a job binds it on the thread that runs each micro-batch (Spark calls
``foreachBatch`` on its own callback thread), and concurrent jobs in one process do not mix.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import logging
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import IO, Any, Literal

import orjson

from ..errors import ascii_digits
from ..secrets import MASK, is_secret_key, mask_secrets

__all__ = [
    "ContextFilter",
    "JsonFormatter",
    "LogFormat",
    "SecretFilter",
    "bind_log_context",
    "current_log_context",
    "log_context",
    "mask_secrets",
    "setup_logging",
]

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", (), None)).keys() | {"message", "asctime", "taskName"}
)


def _mask_value(value: Any, depth: int = 0) -> Any:
    """A masked copy of a log argument or extra value; non-text objects are kept if they hold no secret."""
    if depth > 4:
        return value
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, bytes | bytearray):
        return value
    if isinstance(value, Mapping):
        return {
            k: MASK if isinstance(k, str) and is_secret_key(k) else _mask_value(v, depth + 1) for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return type(value)(_mask_value(v, depth + 1) for v in value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    # Any other object is formatted with %s / %r later: mask its text now if it carries a secret.
    for text in (str(value), repr(value)):
        if mask_secrets(text) != text:
            return mask_secrets(str(value))
    return value


class SecretFilter(logging.Filter):
    """Masks credentials in place; always lets the record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        # Format first, then mask: masking the format string could eat a placeholder
        # ("password=%s") and leave the argument unformatted in the record.
        try:
            message = record.getMessage()
        except Exception:  # a broken format: mask the parts, let the handler report it
            record.msg = _mask_value(record.msg)
            if isinstance(record.args, Mapping):
                record.args = _mask_value(record.args)
            elif record.args:
                record.args = tuple(_mask_value(a) for a in record.args)
        else:
            record.msg = mask_secrets(message)
            record.args = None
        for key, value in list(vars(record).items()):
            if key in _STANDARD_ATTRS:
                continue
            record.__dict__[key] = MASK if is_secret_key(key) else _mask_value(value)
        if record.exc_info and not record.exc_text:
            # Format the traceback now so the (masked) text is what every formatter prints.
            record.exc_text = mask_secrets(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = mask_secrets(record.exc_text)
        return True


_EMPTY: Mapping[str, Any] = MappingProxyType({})
_CONTEXT: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar("changefeed_log_context", default=_EMPTY)


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` (``None`` ones left out) to every record logged in the block (on this thread), then restore."""
    token = _CONTEXT.set({**_CONTEXT.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def bind_log_context(**fields: Any) -> None:
    """Update the current context in place (e.g. the position once a batch knows it); ``None`` removes a field."""
    merged = {**_CONTEXT.get(), **fields}
    _CONTEXT.set({k: v for k, v in merged.items() if v is not None})


def current_log_context() -> Mapping[str, Any]:
    """The fields `ContextFilter` would add right now."""
    return _CONTEXT.get()


class ContextFilter(logging.Filter):
    """Adds the bound context fields to a record; fields the call passed with ``extra=`` win."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _CONTEXT.get().items():
            if key not in record.__dict__:
                record.__dict__[key] = value
        return True


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra=`` fields of a record."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, then the extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info or record.exc_text:
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        line = orjson.dumps(entry, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        return mask_secrets(line)  # last line of defence: nothing formatted above may leak


class _MaskingTextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return mask_secrets(super().format(record))


def _level(text: str) -> int:
    return int(text) if ascii_digits(text) else getattr(logging, text.strip().upper(), logging.WARNING)


def _apply_levels(text: str) -> int:
    """``LEVEL[,LOGGER=LEVEL...]`` (as RUST_LOG): the root's level, and set the named loggers' own.

    ``--log-level warning,changefeed.progress.spark=debug`` shows Spark's per-batch phase times
    without every other DEBUG line.
    """
    root = logging.WARNING
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, value = item.partition("=")
        if eq:
            logging.getLogger(name.strip()).setLevel(_level(value))
        else:
            root = _level(item)
    return root


def setup_logging(
    level: str | int = "WARNING", fmt: LogFormat = "text", stream: IO[str] | None = None
) -> logging.Handler | None:
    """Install one masking handler on the root logger (stderr), replacing one installed before.

    Like ``logging.basicConfig``, text format leaves a root logger that already has other handlers
    (an embedding application, pytest) alone; such an application can add `SecretFilter` to its
    own handlers. JSON format always installs its handler: asking for JSON means a shipper parses
    stderr.
    """
    if isinstance(level, str):
        level = _apply_levels(level)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_changefeed", False)]:
        root.removeHandler(old)
    if fmt == "text" and root.handlers:
        return None  # someone else configured logging (as basicConfig, leave it: their records, their handlers)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler._changefeed = True  # type: ignore[attr-defined]
    handler.addFilter(ContextFilter())  # first: the context's values are masked too
    handler.addFilter(SecretFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else _MaskingTextFormatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    return handler
