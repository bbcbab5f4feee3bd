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
from ..codec.options import PROTOCOLS
from ..errors import ConfigError, EventFormatError
from ..files.layout import SchemaFile
from ..model import DDLEvent, Event, Resolved, RowChange
from ..model.jsonl import EventReader, dumps_event
from ..model.values import b64decode, b64encode

DEFAULTS = CodecOptions()
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
    p.add_argument("--protocol", required=True, choices=PROTOCOLS)
    p.add_argument("--encoding-format", choices=("json", "avro"), default="json", help="simple protocol encoding")
    p.add_argument("--compat", choices=("ticdc", "tiflow"), default="ticdc", help="which TiCDC line to match")
    p.add_argument("--enable-tidb-extension", action="store_true", help="canal-json _tidb and TIDB_WATERMARK")
    p.add_argument("--max-message-bytes", type=int, default=DEFAULTS.max_message_bytes)
    p.add_argument("--max-batch-size", type=int, default=DEFAULTS.max_batch_size)
    p.add_argument("--only-output-updated-columns", action="store_true")
    p.add_argument("--delete-only-output-handle-key-columns", action="store_true")
    p.add_argument(
        "--no-output-old-value", dest="output_old_value", action="store_false", help="open-protocol, debezium"
    )
    p.add_argument("--content-compatible", action="store_true", help="canal-json full mysqlType text")
    p.add_argument("--time-zone", default="UTC")
    p.add_argument("--cluster-id", default=DEFAULTS.cluster_id, help="debezium: TiCDC's server cluster-id")
    p.add_argument("--debezium-disable-schema", action="store_true", help="debezium: no schema sections")
    p.add_argument("--debezium-include-start-ts", action="store_true", help="debezium: source.start_ts")
    p.add_argument("--delimiter", default=",", help="csv")
    p.add_argument("--quote", default='"', help="csv; empty for escape mode")
    p.add_argument("--null", default="\\N", help="csv null string")
    p.add_argument("--include-commit-ts", action="store_true", help="csv")
    p.add_argument("--binary-encoding-method", choices=("base64", "hex"), default="base64", help="csv")
    p.add_argument("--terminator", default="\r\n", help="csv/storage line terminator")
    p.add_argument("--input", type=argparse.FileType("rb"), default=None, help="read from a file, not stdin")
    p.add_argument(
        "--schema-file",
        default=None,
        help="csv (and schema-less debezium) decode: the table's storage-sink schema file "
        "(schema_<version>_<checksum>.json) typing the lines",
    )


def options_from_args(args: argparse.Namespace) -> CodecOptions:
    return CodecOptions(
        protocol=args.protocol,
        compat=args.compat,
        encoding_format=args.encoding_format,
        enable_tidb_extension=args.enable_tidb_extension,
        max_message_bytes=args.max_message_bytes,
        max_batch_size=args.max_batch_size,
        only_output_updated_columns=args.only_output_updated_columns,
        delete_only_output_handle_key_columns=args.delete_only_output_handle_key_columns,
        output_old_value=args.output_old_value,
        content_compatible=args.content_compatible,
        time_zone=args.time_zone,
        cluster_id=args.cluster_id,
        debezium_disable_schema=args.debezium_disable_schema,
        debezium_include_start_ts=args.debezium_include_start_ts,
        delimiter=args.delimiter,
        quote=args.quote,
        null=args.null,
        include_commit_ts=args.include_commit_ts,
        binary_encoding_method=args.binary_encoding_method,
        terminator=args.terminator,
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
    options = options_from_args(args)
    stream = args.input or sys.stdin.buffer
    source = getattr(stream, "name", "<stdin>")
    encode_stream(EventReader(str(source)).read(stream), options, sys.stdout.buffer)
    sys.stdout.buffer.flush()
    return 0


def run_decode(args: argparse.Namespace) -> int:
    options = options_from_args(args)
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
