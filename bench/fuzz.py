"""Mutation fuzzing of every decoder and of the binlog event parser (issue 14, item 8; not run in CI).

    nice .venv/bin/python bench/fuzz.py                                  # 1M messages per decoder, 100k binlogs
    .venv/bin/python bench/fuzz.py --messages 20000 --binlogs 2000 --seed 7 --only canal-json,binlog
    .venv/bin/python bench/fuzz.py --seconds 240                         # at most 4 min per target

The seed corpus is the repository's binlog fixture (tests/fixtures/binlog/full, the one the codec
and capture tests use) run through our file capture, then through each encoder: Canal-JSON (TiDB
extension), Open Protocol (row decoder and its columnar `OpenProtocolBlockDecoder`), Simple JSON
and Avro (decoders primed with a BOOTSTRAP of every table, as tests/codec/test_hostile.py does),
and the storage sink's CSV (one data-file line per message, decoded with the table's schema). The
binlog target mutates one event (header or body) of a fixture file, with and without CRC32
(tests/test_bad_input.py's fixtures), and reads the whole file with `file_capture`.

Each input is one to four mutations of a corpus entry (bit flips, byte overwrites, inserted
"interesting" bytes and tokens, deletions, truncation, duplicated or spliced chunks), drawn from
one random stream per target seeded by ``--seed``: a run is repeatable. An input passes when it
decodes (every event also serialises to JSONL) or raises a `ChangefeedError`. Anything else is a
finding, and so is an input taking more than ``--slow`` seconds (default 1) or growing RSS by more
than ``--rss-mib`` (default 256: kept after the input, or a new peak during it); a hang is cut
after 20 s. The address space is capped (``--memory-cap-gib``), so a memory bomb ends in
MemoryError (a finding) instead of taking the machine down. Each finding's input is written to
``--out`` (default $TMPDIR/changefeed-fuzz-findings/) as ``<target>-<index>.json`` (key and value
base64, the traceback); ``--reproduce FILE`` re-runs one and lets its exception through.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from changefeed.capture.binlog import file_capture
from changefeed.codec import CodecOptions, Message, make_decoder, make_encoder
from changefeed.codec.csv import CSVDecoder, CSVEncoder
from changefeed.codec.open_protocol import OpenProtocolBlockDecoder, OpenProtocolDecoder
from changefeed.codec.simple import SimpleDecoder, SimpleEncoder
from changefeed.errors import ChangefeedError
from changefeed.model import Event, RowChange, TableSchema
from changefeed.model.jsonl import dumps_event
from changefeed.model.rowblock import RowBlock

ROOT = Path(__file__).resolve().parents[1]
BINLOGS = ROOT / "tests" / "fixtures" / "binlog"
DEFAULT_SEED = 20240514  # tests/test_bad_input.py's
WHERE = "fuzz/0/1"
HANG_S = 20
TARGETS = ("canal-json", "open-protocol", "open-protocol-blocks", "simple-json", "simple-avro", "csv", "binlog")

# Bytes and tokens that reach parsers' edge cases: JSON structure, numbers, escapes, varints, lengths.
TOKENS = [
    b"\x00",
    b"\xff",
    b"\x7f",
    b"\x80",
    b"\xff\xff\xff\xff",
    b"\x00\x00\x00\x00\x00\x00\x00\x00",
    b"\xff\xff\xff\xff\xff\xff\xff\x7f",
    b'"',
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"null",
    b"true",
    b"-",
    b"1e999999",
    b"-0",
    b"9" * 40,
    b"0." + b"0" * 30 + b"1",
    b"NaN",
    b"\r\n",
    b"\n",
    b"\xe2\x80\xa8",
    b"\xc3",
    b"\xf0\x9f\x98",
    b"\\N",
]


def mutate(data: bytes, rng: random.Random, corpus: list[bytes]) -> bytes:
    """One to four mutations of ``data``."""
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 4))):
        n = len(out)
        mode = rng.randrange(9)
        if n == 0:
            out += rng.choice(TOKENS)
            continue
        at = rng.randrange(n)
        if mode == 0:
            out[at] ^= 1 << rng.randrange(8)
        elif mode == 1:
            for _ in range(rng.randint(1, 5)):
                out[rng.randrange(n)] = rng.randrange(256)
        elif mode == 2:
            out[at:at] = rng.choice(TOKENS)
        elif mode == 3:
            del out[at : at + rng.randint(1, 16)]
        elif mode == 4:
            del out[at:]
        elif mode == 5:
            chunk = out[at : at + rng.randint(1, 64)]
            out[at:at] = chunk * rng.randint(1, 4)
        elif mode == 6:
            other = rng.choice(corpus)
            if other:
                cut = rng.randrange(len(other))
                out = out[:at] + bytearray(other[cut : cut + rng.randint(1, 256)]) + out[at:]
        elif mode == 7:
            token = rng.choice(TOKENS)
            out[at : at + len(token)] = token
        else:  # a digit run changed: lengths and numbers
            j = at
            while j < n and 48 <= out[j] <= 57:
                j += 1
            out[at:j] = str(rng.choice((0, 1, 255, 65535, 2**31, 2**63, 10**30, rng.randrange(10**6)))).encode()
    return bytes(out)


# ---------------------------------------------------------------- targets


@dataclass
class Target:
    """A corpus of (key, value) inputs and a way to run one through a fresh or warm decoder."""

    name: str
    corpus: list[tuple[bytes | None, bytes]]
    make: Callable[[], Any]  # a decoder ready for inputs (primed with schemas where needed)
    run: Callable[[Any, bytes | None, bytes], list[Event]]
    mutate_key: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _events() -> list[Event]:
    return list(file_capture(BINLOGS / "full").events())


def _rows(events: list[Event]) -> list[RowChange]:
    return [e for e in events if isinstance(e, RowChange)]


def _tables(rows: list[RowChange]) -> list[TableSchema]:
    seen: dict[tuple[str, str], TableSchema] = {}
    for r in rows:
        seen.setdefault((r.table_schema.schema, r.table_schema.table), r.table_schema)
    return list(seen.values())


def _messages(options: CodecOptions, events: list[Event]) -> list[tuple[bytes | None, bytes]]:
    encoder = make_encoder(options)
    out: list[tuple[bytes | None, bytes]] = []
    for ev in events:
        try:
            msgs = encoder.encode([ev])
        except ChangefeedError:
            continue
        out += [(m.key, m.value) for m in msgs if m.value is not None]
    return out


def _decode(dec: Any, key: bytes | None, value: bytes) -> list[Event]:
    return list(dec.decode(Message(key=key, value=value), WHERE))


def build_targets() -> dict[str, Target]:
    events = _events()
    rows = _rows(events)
    tables = _tables(rows)
    targets: dict[str, Target] = {}

    canal = CodecOptions(protocol="canal-json", enable_tidb_extension=True)
    targets["canal-json"] = Target("canal-json", _messages(canal, events), lambda: make_decoder(canal), _decode)

    op = CodecOptions(protocol="open-protocol")
    op_corpus = _messages(op, events)
    targets["open-protocol"] = Target("open-protocol", op_corpus, lambda: make_decoder(op), _decode, mutate_key=True)

    def blocks(dec: OpenProtocolBlockDecoder, key: bytes | None, value: bytes) -> list[Event]:
        (decoded,) = dec.decode([Message(key=key, value=value)], [WHERE], [{}])
        # RowBlocks are rows kept as columns: materialise them, as a sink would.
        return [ev for item in decoded for ev in (item.rows() if isinstance(item, RowBlock) else [item])]

    targets["open-protocol-blocks"] = Target(
        "open-protocol-blocks",
        op_corpus,
        lambda: OpenProtocolBlockDecoder(OpenProtocolDecoder(op)),
        blocks,
        mutate_key=True,
    )

    for name, fmt in (("simple-json", "json"), ("simple-avro", "avro")):
        so = CodecOptions(protocol="simple", encoding_format=fmt)

        def primed(so: CodecOptions = so) -> SimpleDecoder:
            dec = SimpleDecoder(so)
            enc = SimpleEncoder(so)
            for ts in tables:
                dec.decode(enc.encode_bootstrap(ts))
            return dec

        targets[name] = Target(name, _messages(so, events), primed, _decode)

    csv = CodecOptions(protocol="csv", include_commit_ts=True)
    by_table = {(t.schema, t.table): t for t in tables}
    csv_corpus: list[tuple[bytes | None, bytes]] = []
    encoder = CSVEncoder(csv)
    for r in rows:
        for m in encoder.encode([r]):
            if m.value:
                # The key names the table (not mutated): the decoder gets that table's schema.
                csv_corpus.append((f"{r.table_schema.schema}.{r.table_schema.table}".encode(), m.value))

    def csv_run(dec: CSVDecoder, key: bytes | None, value: bytes) -> list[Event]:
        schema, _, table = (key or b"").decode().partition(".")
        return list(dec.decode_file(value, by_table[(schema, table)], where=WHERE))

    targets["csv"] = Target("csv", csv_corpus, lambda: CSVDecoder(csv), csv_run)
    targets["binlog"] = _binlog_target()
    return targets


def _event_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each event of a binlog file (19-byte v4 headers; the 4-byte magic first)."""
    spans, pos = [], 4
    while pos + 19 <= len(data):
        size = int.from_bytes(data[pos + 9 : pos + 13], "little")
        if size < 19 or pos + size > len(data):
            break
        spans.append((pos, pos + size))
        pos += size
    return spans


def _binlog_target() -> Target:
    files = [p for d in ("nocrc", "full") for p in sorted((BINLOGS / d).glob("binlog.0*"))]
    corpus = [(str(p).encode(), p.read_bytes()) for p in files]
    spans = {str(p).encode(): _event_spans(p.read_bytes()) for p in files}
    tmp = Path(tempfile.mkdtemp(prefix="changefeed-fuzz-binlog-"))
    target = tmp / "binlog.000001"

    def run(_: Any, key: bytes | None, value: bytes) -> list[Event]:
        target.write_bytes(value)
        return list(file_capture(target).events())

    return Target("binlog", corpus, lambda: None, run, extra={"spans": spans})


def binlog_mutation(key: bytes, data: bytes, rng: random.Random, spans: dict[bytes, list[tuple[int, int]]]) -> bytes:
    """One event of the file mutated in place (header or body), or cut short inside it."""
    events = spans[key]
    start, end = rng.choice(events)
    if rng.random() < 0.1:
        return data[: rng.randrange(start, end)]
    body = mutate(data[start:end], rng, [data[s:e] for s, e in events])
    return data[:start] + body + data[end:]


# ---------------------------------------------------------------- the loop


class Hang(Exception):  # noqa: N818 - not an error of ours: a finding
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hang(f"no result within {HANG_S} s")


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@dataclass
class Outcome:
    decoded: int = 0
    rejected: int = 0
    findings: int = 0
    slow: int = 0
    big: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    max_s: float = 0.0
    seconds: float = 0.0
    inputs: int = 0


def fuzz(target: Target, count: int, seed: int, budget: float, out: Path, slow_s: float, rss_mib: float) -> Outcome:
    result = Outcome()
    rng = random.Random(f"{seed}/{target.name}")
    corpus_values = [v for _, v in target.corpus]
    dec = target.make()
    started = time.monotonic()
    for i in range(count):
        if time.monotonic() - started > budget:
            break
        key, value = rng.choice(target.corpus)
        if target.name == "binlog":
            value = binlog_mutation(key or b"", value, rng, target.extra["spans"])
        elif target.mutate_key and key is not None and rng.random() < 0.3:
            key = mutate(key, rng, [k for k, _ in target.corpus if k])
        else:
            value = mutate(value, rng, corpus_values)
        rss_before, peak_before = _rss_mib(), _peak_rss_mib()
        t0 = time.perf_counter()
        problem: str | None = None
        try:
            signal.alarm(HANG_S)
            try:
                events = target.run(dec, key, value)
                for ev in events:
                    dumps_event(ev)
            finally:
                signal.alarm(0)
            result.decoded += 1
        except ChangefeedError:
            result.rejected += 1
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            problem = f"{type(exc).__name__}: {exc}"[:300]
            result.kinds[type(exc).__name__] += 1
            tb = traceback.format_exc()
            dec = target.make()  # state after an unexpected error is not trusted
        took = time.perf_counter() - t0
        result.max_s = max(result.max_s, took)
        grown = max(_rss_mib() - rss_before, _peak_rss_mib() - peak_before)  # kept, or a transient peak
        if problem is None and took > slow_s:
            problem, tb = f"slow: {took:.2f} s", ""
            result.slow += 1
        if problem is None and grown > rss_mib:
            problem, tb = f"RSS grew {grown:.0f} MiB", ""
            result.big += 1
        if problem is not None:
            result.findings += 1
            out.mkdir(parents=True, exist_ok=True)
            record = {
                "target": target.name,
                "seed": seed,
                "index": i,
                "problem": problem,
                "traceback": tb,
                "key": base64.b64encode(key).decode() if key is not None else None,
                "value": base64.b64encode(value).decode(),
            }
            (out / f"{target.name}-{i}.json").write_text(json.dumps(record, indent=1))
            print(f"  FINDING {target.name} #{i}: {problem}", flush=True)
        result.inputs += 1
        if result.inputs % 50_000 == 0:
            rate = result.inputs / (time.monotonic() - started)
            print(
                f"  {target.name}: {result.inputs} inputs, {rate:,.0f}/s, peak RSS {_peak_rss_mib():.0f} MiB",
                flush=True,
            )
    result.seconds = time.monotonic() - started
    return result


def reproduce(path: Path) -> int:
    record = json.loads(path.read_text())
    target = build_targets()[record["target"]]
    key = base64.b64decode(record["key"]) if record["key"] is not None else None
    value = base64.b64decode(record["value"])
    events = target.run(target.make(), key, value)
    print(f"{len(events)} events")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--messages", type=int, default=1_000_000, help="mutated messages per decoder")
    p.add_argument("--binlogs", type=int, default=100_000, help="mutated binlog events (one per file read)")
    p.add_argument("--seconds", type=float, default=float("inf"), help="time budget per target")
    p.add_argument("--only", default=",".join(TARGETS), help="comma-separated targets: " + ", ".join(TARGETS))
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "changefeed-fuzz-findings")
    p.add_argument("--slow", type=float, default=1.0, help="seconds an input may take")
    p.add_argument("--rss-mib", type=float, default=256.0, help="RSS growth an input may cause")
    p.add_argument("--memory-cap-gib", type=float, default=4.0, help="address-space cap (a bomb ends in MemoryError)")
    p.add_argument("--reproduce", type=Path, help="re-run one finding file and let its exception through")
    args = p.parse_args(argv)
    if args.reproduce:
        return reproduce(args.reproduce)
    logging.getLogger("changefeed").setLevel(logging.ERROR)  # the capture's warnings about mangled DDL: noise here
    cap = int(args.memory_cap_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    signal.signal(signal.SIGALRM, _alarm)
    wanted = [t.strip() for t in args.only.split(",") if t.strip()]
    unknown = set(wanted) - set(TARGETS)
    if unknown:
        p.error(f"unknown targets {sorted(unknown)}")
    targets = build_targets()
    print(f"seed {args.seed}; corpus sizes: " + ", ".join(f"{n} {len(targets[n].corpus)}" for n in wanted), flush=True)
    total = 0
    lines = []
    for name in wanted:
        count = args.binlogs if name == "binlog" else args.messages
        r = fuzz(targets[name], count, args.seed, args.seconds, args.out, args.slow, args.rss_mib)
        total += r.findings
        kinds = ", ".join(f"{k} {n}" for k, n in r.kinds.most_common()) or "-"
        line = (
            f"| {name} | {r.inputs:,} | {r.seconds:,.0f} | {r.inputs / max(r.seconds, 1e-9):,.0f} | {r.decoded:,} | "
            f"{r.rejected:,} | {r.findings} ({kinds}; slow {r.slow}, RSS {r.big}) | {r.max_s * 1000:,.0f} |"
        )
        lines.append(line)
        print(line, flush=True)
    print("\n| target | inputs | s | inputs/s | decoded | ChangefeedError | findings | slowest ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(lines))
    print(f"peak RSS {_peak_rss_mib():.0f} MiB; {total} finding(s)" + (f" in {args.out}" if total else ""))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
