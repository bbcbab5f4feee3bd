"""``changefeed encode`` / ``changefeed decode``: JSONL events <-> protocol messages, streaming.

Messages travel as JSONL too (docs/cli.md): ``{"key": base64|null, "value": base64|null,
"partition": n|null}``, so a stream can be inspected, stored or replayed without a broker.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any

import orjson

from ..codec import CodecOptions, Message, make_decoder, make_encoder
from ..errors import ConfigError, EventFormatError
from ..files.layout import SchemaFile
from ..model import DDLEvent, Event, Resolved, RowChange
from ..model.jsonl import EventReader, dumps_event
from ..model.values import b64decode, b64encode

# Rows encoded between two `build()` calls: bounds memory while leaving Open Protocol's batching
# (max-batch-size / max-message-bytes) to decide message boundaries inside the chunk.
_ROWS_PER_BUILD = 4096


def _never(event: DDLEvent) -> bool:
    return False


def register(sub: argparse._SubParsersAction) -> None:
    enc = sub.add_parser("encode", help="JSONL events on stdin -> protocol messages (JSONL) on stdout")
    _add_codec_options(enc)
    enc.set_defaults(func=run_encode)
    dec = sub.add_parser("decode", help="protocol messages (JSONL) on stdin -> JSONL events on stdout")
    _add_codec_options(dec)
    dec.set_defaults(func=run_decode)


def _add_codec_options(p: argparse.ArgumentParser) -> None:
    CodecOptions.add_arguments(p)
    p.add_argument("--input", type=argparse.FileType("rb"), default=None, help="read from a file, not stdin")
    p.add_argument(
        "--schema-file",
        default=None,
        help="csv (and schema-less debezium) decode: the table's storage-sink schema file "
        "(schema_<version>_<checksum>.json) typing the lines",
    )


def dumps_message(msg: Message) -> bytes:
    obj: dict[str, Any] = {
        "key": None if msg.key is None else b64encode(msg.key),
        "value": None if msg.value is None else b64encode(msg.value),
        "partition": msg.partition,
    }
    if msg.topic is not None:
        obj["topic"] = msg.topic
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


def read_messages(stream: Iterable[bytes], source: str) -> Iterator[tuple[Message, str]]:
    """Parse message JSONL, yielding each message with its location for error reports."""
    for lineno, line in enumerate(stream, 1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            obj = orjson.loads(line)
            if not isinstance(obj, dict):
                raise TypeError("a message line must be a JSON object")
            key, value = obj.get("key"), obj.get("value")
            msg = Message(
                key=None if key is None else b64decode(key),
                value=None if value is None else b64decode(value),
                partition=obj.get("partition"),
                topic=obj.get("topic"),
            )
        except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
            raise EventFormatError(f"bad message line: {exc}", where=where) from None
        yield msg, where


def encode_stream(events: Iterable[Event], options: CodecOptions, out: IO[bytes]) -> int:
    encoder = make_encoder(options)
    written = pending = 0
    for event in events:
        if isinstance(event, RowChange):
            encoder.append_row(event)
            pending += 1
            if pending < _ROWS_PER_BUILD:
                continue
            messages = encoder.build()
        else:
            messages = encoder.build()
            if isinstance(event, DDLEvent):
                if not getattr(encoder, "skips_ddl", _never)(event):  # debezium: TiCDC sends no message
                    messages.append(encoder.encode_ddl(event))
            elif isinstance(event, Resolved):
                resolved = encoder.encode_resolved(event)
                if resolved is not None:
                    messages.append(resolved)
        pending = 0
        for msg in messages:
            out.write(dumps_message(msg))
        written += len(messages)
    for msg in encoder.build():
        out.write(dumps_message(msg))
        written += 1
    return written


def run_encode(args: argparse.Namespace) -> int:
    options = CodecOptions.from_args(args)
    stream = args.input or sys.stdin.buffer
    source = getattr(stream, "name", "<stdin>")
    encode_stream(EventReader(str(source)).read(stream), options, sys.stdout.buffer)
    sys.stdout.buffer.flush()
    return 0


def run_decode(args: argparse.Namespace) -> int:
    options = CodecOptions.from_args(args)
    decoder = make_decoder(options)
    if options.protocol == "csv" and not args.schema_file:
        # CSV lines carry no types: TiCDC's consumer types them from the table's schema file.
        raise ConfigError("csv lines carry no column types: pass the table's schema file with --schema-file")
    if args.schema_file and options.protocol in ("csv", "debezium"):
        # Debezium messages without their schema section (debezium-disable-schema) are typed the same way.
        try:
            with open(args.schema_file, "rb") as f:
                text = f.read()
        except OSError as exc:
            raise ConfigError(f"cannot read --schema-file: {exc.strerror}", where=args.schema_file) from None
        schema_file = SchemaFile.parse(text, where=args.schema_file)
        decoder.set_table_schema(schema_file.to_table_schema())  # type: ignore[attr-defined]
    stream = args.input or sys.stdin.buffer
    out = sys.stdout.buffer
    for msg, where in read_messages(stream, str(getattr(stream, "name", "<stdin>"))):
        for event in decoder.decode(msg, where):
            out.write(dumps_event(event))
    pending = getattr(decoder, "pending", None)
    if callable(pending) and pending():
        raise EventFormatError(
            f"{pending()} messages still wait for their table schema at end of input "
            "(no BOOTSTRAP or DDL message for them)"
        )
    out.flush()
    return 0
