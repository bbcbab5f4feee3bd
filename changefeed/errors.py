"""One flat hierarchy of errors; each carries where it happened.

A leaf module (imports nothing of ours), so every layer, the model included, may raise these.
``where`` names the input position a person needs to find the bad data: a file and byte offset,
a topic/partition/offset, a binlog file:pos, a line number. `clip` and `ascii_digits` keep bad input from breaking the
error path itself (a flooded message, a Unicode digit ``int()`` rejects).
"""

from __future__ import annotations

from typing import Any


class ChangefeedError(Exception):
    """Base of every error changefeed raises on purpose."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(f"{message} (at {where})" if where else message)


class ConfigError(ChangefeedError):
    """A configuration or command-line option is missing, unknown or inconsistent."""


class EventFormatError(ChangefeedError):
    """A line of the JSONL event interchange form is malformed."""


class CodecError(ChangefeedError):
    """A protocol message cannot be encoded or decoded."""


class MessageTooLargeError(CodecError):
    """An event does not fit ``max-message-bytes`` even on its own."""


class UnknownSchemaError(CodecError):
    """A message refers to a table schema (version) the decoder has not seen."""


class CaptureError(ChangefeedError):
    """A source (binlog, KV records) cannot be read or decoded."""


class SinkError(ChangefeedError):
    """A sink cannot write, or found the destination in a state it must not overwrite."""


def clip(value: object, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, so a 100 KB bad value cannot flood an error line.

    A clipped text keeps its start and says how long the whole was: ``'1234...' ... (102400 chars)``.
    """
    if isinstance(value, int) and value.bit_length() > 4 * limit:  # repr of a huge int is slow or refused
        return f"<a {value.bit_length()}-bit integer>"
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} chars)"


def ascii_digits(text: str) -> bool:
    """``text`` is one or more ASCII digits 0-9.

    ``str.isdigit`` also accepts superscripts and other Unicode digits (``"²"``) that ``int()``
    then rejects, so user input validated with it fails later with a traceback.
    """
    return text.isascii() and text.isdigit()


def positive_int(value: str, what: str) -> int:
    """``value`` as an integer >= 1 written in ASCII digits; anything else is a ConfigError naming ``what``."""
    if not ascii_digits(value) or int(value) < 1:
        raise ConfigError(f"{what} must be a positive integer, got {clip(value)}")
    return int(value)


def typed(value: object, kind: type, key: str) -> Any:
    """A TOML value or a URI parameter string as ``kind`` (bool, int or str); a ConfigError naming ``key``."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            return true_false(value, key)
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and ascii_digits(value.strip()):
            return int(value)
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if not isinstance(value, str):
        raise ConfigError(f"{key} must be a string, got {value!r}")
    return value


def true_false(value: str, what: str) -> bool:
    """``"true"``/``"false"`` (any case) as a bool; anything else is a ConfigError naming ``what``."""
    if value.lower() not in ("true", "false"):
        raise ConfigError(f"{what} must be true or false, got {value!r}")
    return value.lower() == "true"
