"""One table of cases run over every protocol the registry knows (``codec.specs()``).

A new codec is covered as soon as its package declares a `CodecSpec`: the declaration, the shape of
its folder, garbage input and the every-type round trip are checked here for each. What a protocol
cannot carry is stated once, in `CARRIES`; a protocol missing from it fails the round trip.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from changefeed import codec
from changefeed.codec import CodecOptions, CodecSpec, Message, make_decoder, make_encoder
from changefeed.codec.base import BufferingDecoder, Decoder, Encoder, LineDecoder, TableFileDecoder
from changefeed.errors import CodecError, ConfigError
from changefeed.model import DDLEvent, Event, Op, Resolved, RowChange, TableSchema
from changefeed.model.ddl import ActionType
from changefeed.model.tso import compose_tso
from tests.codec.debezium_losses import through_debezium
from tests.codec.helpers import ALL_TYPES, ALL_VALUES, same_image

ROOT = Path(__file__).resolve().parents[2]
CODEC_DIR = ROOT / "changefeed" / "codec"
SPECS = codec.specs()
IDS = [s.name for s in SPECS]

# ------------------------------------------------------------------ the declarations


def test_the_registry_holds_every_protocol_once() -> None:
    assert [s.name for s in SPECS] == list(codec.options.PROTOCOLS)
    assert len({s.encoder for s in SPECS}) == len({s.decoder for s in SPECS}) == len(SPECS)
    with pytest.raises(ConfigError, match="unknown protocol 'nope'"):
        codec.spec("nope")


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_spec_declares_classes_and_transports(spec: CodecSpec) -> None:
    assert issubclass(spec.encoder, Encoder) and issubclass(spec.decoder, Decoder)
    assert spec.encoder.protocol == spec.decoder.protocol == spec.name
    assert spec.transports and spec.transports <= {"kafka", "storage"}
    assert codec.spec(spec.name) is spec
    o = CodecOptions(protocol=spec.name)
    assert type(make_encoder(o)) is spec.encoder and type(make_decoder(o)) is spec.decoder
    for transport in ("kafka", "storage"):
        assert (spec.name in codec.protocols_for(transport)) == spec.supports(transport)  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", [s for s in SPECS if s.supports("storage")], ids=lambda s: s.name)
def test_storage_decoders_read_files(spec: CodecSpec) -> None:
    """The storage reader decodes whole data files: one message a line, or typeless lines with the schema."""
    decoder = make_decoder(CodecOptions(protocol=spec.name))
    assert isinstance(decoder, LineDecoder | TableFileDecoder)


def test_buffering_decoders_are_declared() -> None:
    buffering = {s.name for s in SPECS if isinstance(make_decoder(CodecOptions(protocol=s.name)), BufferingDecoder)}
    assert buffering == {"simple"}  # the Kafka readers hold its DMLs until their schema arrives


# ------------------------------------------------------------------ the shape of a codec folder


def _shape_table() -> dict[str, tuple[set[str], set[str]]]:
    """Protocol folder -> (its columnar modules, its extra modules), from the table in docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("### The shape of a codec folder", 1)[1].split("\n## ", 1)[0]
    out: dict[str, tuple[set[str], set[str]]] = {}
    for folder, columnar, extras in re.findall(r"^\| `(\w+)/` \| ([^|]*) \| ([^|]*) \|", section, re.M):
        out[folder] = (set(re.findall(r"`(\w+)\.py`", columnar)), set(re.findall(r"`(\w+)\.py`", extras)))
    return out


REQUIRED = {"__init__", "encoder", "decoder", "values"}
OPTIONAL = {"columns", "blocks"}  # encoding from / decoding into Arrow row blocks


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_folder_has_the_shape(spec: CodecSpec) -> None:
    package = spec.encoder.__module__.rsplit(".", 1)[0]
    folder = CODEC_DIR / package.rsplit(".", 1)[1]
    assert spec.decoder.__module__ == f"{package}.decoder" and spec.encoder.__module__ == f"{package}.encoder"
    modules = {p.stem for p in folder.glob("*.py")}
    columnar, extras = _shape_table()[folder.name]
    assert modules >= REQUIRED, f"{folder.name}/ lacks {sorted(REQUIRED - modules)}"
    assert modules & OPTIONAL == columnar, (
        f"{folder.name}/: its row in docs/architecture.md names other columnar modules"
    )
    assert modules - REQUIRED - OPTIONAL == extras, f"{folder.name}/: list its extra modules in docs/architecture.md"
    assert importlib.import_module(package).SPEC is spec


def test_every_folder_is_a_registered_codec() -> None:
    folders = {p.parent.name for p in CODEC_DIR.glob("*/__init__.py")}
    assert folders == set(_shape_table()) == {s.encoder.__module__.split(".")[2] for s in SPECS}


# ------------------------------------------------------------------ garbage in


GARBAGE = [b"\xff\xfe\x00garbage", b"{", b"[1, 2", b'{"a":', b"\x00" * 40, b"not json at all"]


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
@pytest.mark.parametrize("blob", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_is_a_codec_error(spec: CodecSpec, blob: bytes) -> None:
    decoder = make_decoder(CodecOptions(protocol=spec.name))
    if isinstance(decoder, TableFileDecoder):
        decoder.set_table_schema(ALL_TYPES)  # type: ignore[attr-defined]
    with pytest.raises(CodecError) as err:
        decoder.decode(Message(key=blob, value=blob), where="garbage@7")
    assert str(err.value).strip()


# ------------------------------------------------------------------ every type, there and back


@dataclass(frozen=True)
class Carries:
    """What one protocol carries of the every-type stream (the rest of the stream is checked as it is)."""

    options: dict[str, Any] = field(default_factory=dict)
    ddl: bool = True  # a DDL message comes back as the DDL event
    resolved: bool = True  # the resolved ts comes back
    # the decoder is given the table: CSV files carry no types, Debezium's schema no DECIMAL scale
    schema_given: bool = False
    images: Callable[[list[Event]], list[Event]] = list  # the row images a consumer gets back


CARRIES: dict[str, Carries] = {
    "open-protocol": Carries(),
    "canal-json": Carries({"enable_tidb_extension": True}),
    "simple": Carries(),
    "debezium": Carries({"enable_tidb_extension": True}, schema_given=True, images=through_debezium),
    "csv": Carries(
        {"include_commit_ts": True, "csv_output_old_value": True}, ddl=False, resolved=False, schema_given=True
    ),
}

TS = [compose_tso(1_700_000_000_000 + i, 0) for i in range(6)]
OLD = tuple(v if i != 1 else 1 for i, v in enumerate(ALL_VALUES))


def _stream(ts: TableSchema) -> list[Event]:
    create = DDLEvent(ts.schema, ts.table, "CREATE TABLE `all_types` (...)", ActionType.CREATE_TABLE, TS[0])
    return [
        replace(create, table_schema=ts),
        RowChange(Op.INSERT, ts, TS[1], new=ALL_VALUES),
        RowChange(Op.UPDATE, ts, TS[2], new=ALL_VALUES, old=OLD),
        RowChange(Op.DELETE, ts, TS[3], old=ALL_VALUES),
        Resolved(TS[4]),
    ]


def _expected(carries: Carries, events: list[Event]) -> list[Event]:
    out = carries.images(events)
    return [
        e
        for e in out
        if not (isinstance(e, DDLEvent) and not carries.ddl) and not (isinstance(e, Resolved) and not carries.resolved)
    ]


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_type_round_trip(spec: CodecSpec) -> None:
    carries = CARRIES.get(spec.name)
    assert carries is not None, f"add {spec.name!r} to CARRIES: what its messages carry of the every-type stream"
    o = CodecOptions(protocol=spec.name, **carries.options)
    events = _stream(ALL_TYPES)
    messages = [m for m in make_encoder(o).encode(events) if m.value]
    assert sum(m.rows for m in messages) == 3
    decoder = make_decoder(o)
    if carries.schema_given:
        decoder.set_table_schema(ALL_TYPES)  # type: ignore[attr-defined]
    back = [e for i, m in enumerate(messages) for e in decoder.decode(m, where=f"m{i}")]
    want = _expected(carries, events)
    assert [type(e) for e in back] == [type(e) for e in want]
    for got, exp in zip(back, want, strict=True):
        assert got.commit_ts == exp.commit_ts
        if isinstance(exp, RowChange):
            assert isinstance(got, RowChange)
            assert got.op is exp.op and (got.schema, got.table) == (exp.schema, exp.table)
            assert [c.name for c in got.table_schema.columns] == [c.name for c in exp.table_schema.columns]
            assert [c.type_code for c in got.table_schema.columns] == [c.type_code for c in exp.table_schema.columns]
            assert same_image(got.new, exp.new), ("new", got.new, exp.new)
            assert same_image(got.old, exp.old), ("old", got.old, exp.old)
        elif isinstance(exp, DDLEvent):
            assert isinstance(got, DDLEvent)
            assert (got.schema, got.table, got.query) == (exp.schema, exp.table, exp.query)
