"""Canal-JSON column renderers: one table's rows (`TableRows`) to message values, a column at a time.

Why: the per-row encoder (`encoder.py`) spends most of a row on Python work per value. Here each
column of a table's Arrow batch becomes its JSON text in a few pyarrow compute passes, and a
row's whole message is one ``binary_join_element_wise`` over constant text and those columns.
The bytes are exactly the per-row path's (tests/codec/test_canal_json_columns.py holds both
paths to that).

What a DML message is made of (spec §2, `encoder._dml`)::

    {"id":0,"database":..,"table":..,"pkNames":..,"isDdl":false,"type":"<OP>","es":<commit_ts >> 18>,
     "ts":<clock>,"sql":"","sqlType":{..},"mysqlType":{..},"old":null|[{..}],"data":[{..}]
     [,"_tidb":{"commitTs":<commit_ts>[,"rowkey":"<base64>"]}]}

Per table everything is constant text except the op (three prefixes), ``es``, ``sqlType`` when an
unsigned value needs TiCDC's promotion, the ``data``/``old`` objects and the ``_tidb`` members.
``ts`` is the options' clock, read once per call (a pinned clock gives the per-row bytes).

Values (spec §2.5): every non-NULL value is a JSON string of its text form, NULL is ``null``.
Integers (also YEAR/ENUM/SET/BIT) are Arrow's decimal casts. FLOAT/DOUBLE are Arrow's casts,
which have the shortest round-trip digits (float32 digits for FLOAT) and are Go's
``FormatFloat(v, 'f', -1, bits)`` text wherever Arrow writes them positionally; the values
Arrow writes with an exponent (|v| >= 1e10 or < 1e-6 or so), NaN and Inf go per value through
`float32_text`/`float64_text` (the documented per-value fallback). DECIMAL is Arrow's text at
the type's scale, whose exponent form (adjusted exponent below -6: ``0E-30``, ``1.5E-29``) is
rewritten to plain digits column-wise. Strings and binary (ISO-8859-1: byte 0xNN is U+00NN)
are escaped as orjson + `easyjson_fix` escape them, with numpy: one table lookup per byte gives
its output bytes (1-6), a compress packs them and a cumulative sum gives the new offsets.

Options: `enable_tidb_extension` (``commitTs``, and ``rowkey`` for integer handles with
``output_row_key``), ``compat=tiflow``, ``delete_only_output_handle_key_columns``,
``only_output_updated_columns`` ([ticdc] compares the rendered texts, [tiflow] the values) and
``content_compatible`` are rendered here. Large messages (``max_message_bytes`` and its
handle-key-only/claim-check forms) and compression are per row, in `append_rendered`.

Not rendered (`render_table` returns None and the caller encodes the rows one by one): tables
without columns, a column whose Arrow type does not hold the model's value type (e.g. DECIMAL
as text from ``BlockCapture(decimal="string")``, which the row path refuses too), DECIMAL at a
scale other than the column's, non-integer handles for ``rowkey``. Rows whose images leave
columns out (MINIMAL/NOBLOB) come back as None; the caller encodes those per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...model import Column, Op, TypeCode
from ...model.rowblock import TableRows
from ..gojson import easyjson_fix
from ..values import B64_ALPHABET, decimal_texts, float32_text, float64_text, value_bytes
from . import encoder as _encoder  # its per-table plans; a cycle: names are looked up at call time
from .values import INTEGER_LIKE

_STRING = pa.string()
_OPS = (Op.INSERT, Op.UPDATE, Op.DELETE)  # rowblock.OP_CODES order

# ------------------------------------------------------------------ JSON string escaping

# What orjson escapes, as `easyjson_fix` then changes it (\b and \f as \u0008/\u000c, HTML
# characters and U+2028/9 as \uXXXX): one byte sequence per byte value.
_SHORT = {8: "\\u0008", 9: "\\t", 10: "\\n", 12: "\\u000c", 13: "\\r", 34: '\\"', 92: "\\\\"}
_ESCAPES = {c: _SHORT.get(c, f"\\u{c:04x}") for c in range(32)} | {c: _SHORT.get(c, f"\\u{c:04x}") for c in b'"\\<>&'}


def _byte_table(latin1: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per byte value: output length (uint8), output bytes and a keep-mask of those bytes, each
    as one uint64 (8 byte slots) so a row's expansion is a 1-D gather; ``latin1``: bytes >= 0x80
    are the code points U+0080..U+00FF in UTF-8."""
    lengths = np.ones(256, np.uint8)
    codes = np.zeros((256, 8), np.uint8)
    codes[:, 0] = np.arange(256)
    for c in range(256):
        if c in _ESCAPES:
            out = _ESCAPES[c].encode()
        elif latin1 and c >= 0x80:
            out = chr(c).encode()
        else:
            continue
        lengths[c] = len(out)
        codes[c, : len(out)] = np.frombuffer(out, np.uint8)
    keep = (np.arange(8) < lengths[:, None]).astype(np.uint8)
    return lengths, codes.view(np.uint64).reshape(256), keep.view(np.uint64).reshape(256)


_TEXT_TABLE = _byte_table(latin1=False)
_BINARY_TABLE = _byte_table(latin1=True)


def _any_special(data: np.ndarray, latin1: bool) -> bool:
    """Does any byte need more than itself? (a few SIMD compares, cheaper than a table lookup)"""
    found = (data < 0x20) | (data == 0x22) | (data == 0x5C) | (data == 0x3C) | (data == 0x3E) | (data == 0x26)
    if latin1:
        found |= data >= 0x80
    return bool(found.any())


def escape(values: pa.Array, latin1: bool = False) -> pa.Array:
    """String (or, with ``latin1``, binary) array -> the text between the quotes of each JSON
    value, as orjson + `easyjson_fix` write it (binary as ISO-8859-1 text).

    Vectorised: each byte's output (1 to 6 bytes) comes from a table; the outputs are packed
    with one compress and the offsets follow from a cumulative sum of the lengths. U+2028/9
    (three bytes in, six out) are replaced afterwards, in the rare arrays that hold them.
    """
    if pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type):
        values = values.cast(pa.binary() if latin1 else _STRING)
    if not len(values):
        return values.cast(_STRING)
    offsets, data = value_bytes(values)
    out = values if values.type == _STRING else values.view(_STRING)
    if _any_special(data, latin1):
        lengths_of, codes_of, keep_of = _BINARY_TABLE if latin1 else _TEXT_TABLE
        lengths = lengths_of[data]
        packed = np.compress(keep_of[data].view(np.bool_), codes_of[data].view(np.uint8))
        ends = np.concatenate((np.zeros(1, np.int64), np.cumsum(lengths, dtype=np.int64)))
        new_offsets = ends[offsets].astype(np.int32)
        validity = None
        if values.null_count:
            valid = values.is_valid().to_numpy(zero_copy_only=False)
            validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        out = pa.Array.from_buffers(
            _STRING, len(values), [validity, pa.py_buffer(new_offsets), pa.py_buffer(packed)], values.null_count
        )
    if not latin1 and bool((data == 0xE2).any()):
        for ch in ("\u2028", "\u2029"):
            out = pc.replace_substring(out, ch, f"\\u{ord(ch):04x}")
    return out


# ------------------------------------------------------------------ value texts


def _float_texts(values: pa.Array, float32: bool) -> pa.Array:
    """Go ``strconv.FormatFloat(v, 'f', -1, bits)``; Arrow's exponent forms, NaN and Inf per value."""
    texts = pc.cast(values, _STRING)
    if not bool((value_bytes(texts)[1] >= ord("a")).any()):  # no letter: no exponent, nan or inf
        return texts
    odd = pc.match_substring_regex(texts, "[eni]").fill_null(False)
    if pc.any(odd).as_py():
        render = float32_text if float32 else float64_text
        fixed = [render(v) for v in values.filter(odd).to_pylist()]
        texts = pc.replace_with_mask(texts, odd, pa.array(fixed, _STRING))
    return texts


def value_texts(column: Column, values: pa.Array) -> pa.Array | None:
    """A column's values as escaped JSON string contents (NULL stays null); None: not columnar."""
    t = values.type
    tc = column.type_code
    if pa.types.is_large_string(t):
        values, t = values.cast(_STRING), _STRING
    if column.is_bytes:
        if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
            return None
        return escape(values, latin1=True)
    if tc is TypeCode.FLOAT or tc is TypeCode.DOUBLE:
        want = pa.float32() if tc is TypeCode.FLOAT else pa.float64()
        return _float_texts(values, tc is TypeCode.FLOAT) if t == want else None
    if tc is TypeCode.DECIMAL:
        if pa.types.is_decimal(t):
            if column.decimal is not None and column.decimal != t.scale:
                return None  # the per-row renderer requantizes to the column's scale
            return decimal_texts(values)
        return None  # capture's decimal="string": the model's Decimal is a str there, which the row path refuses
    if tc in INTEGER_LIKE:
        return pc.cast(values, _STRING) if pa.types.is_integer(t) else None
    if t == _STRING:  # temporal, JSON and text: the model's str as it is
        return escape(values)
    return None


# ------------------------------------------------------------------ assembling messages

Part: TypeAlias = str | pa.Array | list[Any]  # constant text, one string per row, or parts to concatenate


def _flat(parts: Sequence[Part], into: list[Any]) -> None:
    for p in parts:
        if isinstance(p, list):
            _flat(p, into)
        elif isinstance(p, str):
            if into and isinstance(into[-1], str):
                into[-1] += p
            elif p:
                into.append(p)
        else:
            into.append(p)


def _concat(parts: Sequence[Part]) -> str | pa.Array:
    """Row-wise concatenation of constant text and string arrays (a constant when no array)."""
    merged: list[Any] = []
    _flat(parts, merged)
    if not any(isinstance(p, pa.Array) for p in merged):
        return "".join(merged)
    if len(merged) == 1:
        return merged[0]
    return pc.binary_join_element_wise(*merged, "")


def _literal(texts: pa.Array) -> pa.Array:
    """``"text"`` or ``null``."""
    return pc.coalesce(pc.binary_join_element_wise('"', texts, '"', ""), "null")


def _object_parts(keys: Sequence[str], texts: Sequence[pa.Array], open_: str, close: str) -> list[Part]:
    """``{"name":"value",...}`` as parts for `_concat`."""
    parts: list[Part] = [open_]
    for k, (key, t) in enumerate(zip(keys, texts, strict=True)):
        parts.append(key if k == 0 else "," + key)
        if t.null_count == 0:
            parts += ['"', t, '"']
        elif t.null_count == len(t):
            parts.append("null")
        else:
            parts.append(_literal(t))
    parts.append(close)
    return parts


def _changed_parts(keys: Sequence[str], old: Sequence[pa.Array], same: Sequence[pa.Array]) -> Part:
    """``{...}`` of the old values that are not ``same`` (only-output-updated-columns)."""
    members = []
    for key, t, s in zip(keys, old, same, strict=True):
        member = pc.binary_join_element_wise(key, _literal(t), "")
        members.append(pc.if_else(s, pa.scalar(None, _STRING), member))
    if not members:
        return "{}"
    return pc.binary_join_element_wise("{", pc.binary_join_element_wise(*members, ",", null_handling="skip"), "}", "")


def _select(codes: np.ndarray, choices: Sequence[str]) -> Part:
    """Per row ``choices[code]``: a constant when every row has the same code."""
    first = int(codes[0])
    if (codes == first).all():
        return choices[first]
    return pa.array(list(choices), _STRING).take(pa.array(codes))


def _scatter(n: int, mask: np.ndarray, base: Part, part: Part) -> Part:
    """``base`` with the rows of ``mask`` replaced by ``part`` (one value per masked row)."""
    if mask.all():
        return part
    base, part = _concat([base]), _concat([part])
    if not isinstance(base, pa.Array):
        base = pa.nulls(n, _STRING).fill_null(base)
    if isinstance(part, str):
        return pc.if_else(pa.array(mask), part, base)
    return pc.replace_with_mask(base, pa.array(mask), part)


def _take(array: pa.Array, idx: np.ndarray | None) -> pa.Array:
    return array if idx is None else array.take(pa.array(idx))


def _sql_type(plan: _encoder._Plan, main: Sequence[pa.Array], idx: np.ndarray | None) -> Part:
    """``sqlType`` of each row with TiCDC's unsigned promotion (`_Plan.sql_type_for`)."""
    if not plan.promotions:
        return plan.sql_type.decode()
    fragments: list[Part] = [f.decode() for f in plan.sql_fragments]
    promoted = False
    for k, pos, limit, text in plan.promotions:
        col = _take(main[pos], idx)
        if not pa.types.is_integer(col.type):
            continue
        over = pc.greater(col, pa.scalar(limit, col.type)).fill_null(False)
        if pc.any(over).as_py():
            promoted = True
            fragments[k] = pc.if_else(over, text.decode(), fragments[k])
    if not promoted:
        return plan.sql_type.decode()
    parts: list[Part] = ["{"]
    for k, f in enumerate(fragments):
        parts += ([","] if k else []) + [f]
    return _concat([*parts, "}"])


# ------------------------------------------------------------------ record keys (`_tidb.rowkey`)

_SIGN = np.uint64(1 << 63)


def _row_keys(table_id: int, handles: pa.Array) -> pa.Array | None:
    """base64 of `rowkey.record_key` per row (null where the handle is NULL); None: not integers."""
    if not pa.types.is_integer(handles.type):
        return None
    n = len(handles)
    raw = handles.fill_null(0).to_numpy(zero_copy_only=False)
    key = np.zeros((n, 21), np.uint8)  # 19 key bytes, 2 bytes of base64 padding
    key[:, 0] = ord("t")
    key[:, 1:9] = np.frombuffer(((table_id & ((1 << 64) - 1)) ^ (1 << 63)).to_bytes(8, "big"), np.uint8)
    key[:, 9:11] = np.frombuffer(b"_r", np.uint8)
    h = (raw.astype(np.int64).view(np.uint64) if raw.dtype != np.uint64 else raw) ^ _SIGN
    key[:, 11:19] = h.astype(">u8").view(np.uint8).reshape(n, 8)
    groups = key.reshape(n, 7, 3).astype(np.uint32)
    word = (groups[:, :, 0] << 16) | (groups[:, :, 1] << 8) | groups[:, :, 2]
    sextets = np.stack([(word >> s) & 63 for s in (18, 12, 6, 0)], axis=2).reshape(n, 28)
    chars = B64_ALPHABET[sextets]
    chars[:, 26:] = ord("=")
    offsets = np.arange(0, 28 * (n + 1), 28, dtype=np.int32)
    validity = None
    if handles.null_count:
        validity = pa.py_buffer(np.packbits(handles.is_valid().to_numpy(zero_copy_only=False), bitorder="little"))
    return pa.Array.from_buffers(
        _STRING, n, [validity, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())], handles.null_count
    )


# ------------------------------------------------------------------ the renderer


@dataclass(slots=True)
class Settings:
    """The encoder options the DML bytes depend on (the large-message ones are per row)."""

    tidb_extension: bool
    delete_handle_only: bool
    only_updated: bool
    tiflow: bool
    row_key: bool


def _keys(plan: _encoder._Plan) -> tuple[str, ...]:
    return _member_keys(plan.names)


@lru_cache(maxsize=1024)
def _member_keys(names: tuple[str, ...]) -> tuple[str, ...]:
    """``"name":`` of each column, escaped as the row path escapes it (built once per shape)."""
    return tuple(easyjson_fix(_encoder._dumps_str(name)).decode() + ":" for name in names)


def _texts(columns: Sequence[Column], arrays: Sequence[pa.Array]) -> list[pa.Array] | None:
    """`value_texts` of each column, or None when one of them is not columnar."""
    out = []
    for column, values in zip(columns, arrays, strict=True):
        t = value_texts(column, values)
        if t is None:
            return None
        out.append(t)
    return out


def _old_part(
    rows: TableRows, settings: Settings, keys: Sequence[str], main_texts: Sequence[pa.Array], updates: np.ndarray
) -> Part | None:
    """The ``old`` member of the UPDATE rows: all columns, or only the changed ones; None: not columnar."""
    w = rows.width
    uidx = None if updates.all() else np.flatnonzero(updates)
    before = [_take(rows.before(i), uidx) for i in range(w)]
    old_texts = _texts(rows.table_schema.columns, before)
    if old_texts is None:
        return None
    if not settings.only_updated:
        return _object_parts(keys, old_texts, "[{", "}]")
    if settings.tiflow:  # [tiflow] compares the values: same type and ==, NULL == NULL
        new_values = [_take(rows.column(i), uidx) for i in range(w)]
        same = [
            pc.or_(pc.and_(pc.is_null(a), pc.is_null(b)), pc.equal(a, b).fill_null(False))
            for a, b in zip(new_values, before, strict=True)
        ]
    else:  # [ticdc] compares the rendered strings; NULL differs from ""
        new_lits = [_literal(_take(t, uidx)) for t in main_texts]
        same = [pc.equal(a, _literal(b)) for a, b in zip(new_lits, old_texts, strict=True)]
    return ["[", _changed_parts(keys, old_texts, same), "]"]


def render_table(
    rows: TableRows, tp: _encoder._TablePlan, settings: Settings, clock_ms: int
) -> tuple[list[bytes | None], list[bytes | None]] | None:
    """(keys, values) of every row: ``b""`` and the uncompressed value, None for rows with partial
    images; None for the whole table when something is not columnar (see the module docstring)."""
    ts = rows.table_schema
    n, w = rows.num_rows, rows.width
    if not w:
        return None
    if not n:
        return [], []
    ops = rows.ops
    full = rows.full()
    columns = ts.columns
    main_texts = _texts(columns, [rows.column(i) for i in range(w)])
    if main_texts is None:
        return None
    keys = _keys(tp.full)

    deletes = ops == 2
    updates = ops == 1
    commit = rows.batch.column(w + 1)

    # data (and sqlType/mysqlType, which follow the columns data carries)
    data: Part = _object_parts(keys, main_texts, "[{", "}]")
    sql_type = _sql_type(tp.full, [rows.column(i) for i in range(w)], None)
    mysql_type: Part = tp.full.mysql_type.decode()
    if settings.delete_handle_only and deletes.any():
        hp = tp.handle
        didx = None if deletes.all() else np.flatnonzero(deletes)
        handle_data = _object_parts(_keys(hp), [_take(main_texts[p], didx) for p in hp.positions], "[{", "}]")
        data = _scatter(n, deletes, data, handle_data)
        handle_sql = _sql_type(hp, [rows.column(i) for i in range(w)], didx)
        sql_type = _scatter(n, deletes, sql_type, handle_sql)
        mysql_type = _scatter(n, deletes, mysql_type, hp.mysql_type.decode())

    # old: null, or the update's old image (all columns, or only the changed ones)
    old: Part = "null"
    if updates.any():
        old_obj = _old_part(rows, settings, keys, main_texts, updates)
        if old_obj is None:
            return None
        old = _scatter(n, updates, old, old_obj)

    parts: list[Part] = [
        _select(ops, [tp.prefixes[op].decode() for op in _OPS]),
        pc.cast(pc.shift_right(commit, 18), _STRING),
        f',"ts":{clock_ms},"sql":"","sqlType":',
        sql_type,
        ',"mysqlType":',
        mysql_type,
        ',"old":',
        old,
        ',"data":',
        data,
    ]
    if settings.tidb_extension:
        parts += [',"_tidb":{"commitTs":', pc.cast(commit, _STRING)]
        if settings.row_key and ts.table_id > 0 and tp.handle_pos is not None:
            b64 = _row_keys(ts.table_id, rows.column(tp.handle_pos))
            if b64 is None:
                return None
            member = pc.binary_join_element_wise(',"rowkey":"', b64, '"', "")
            parts.append(member if not b64.null_count else pc.coalesce(member, ""))
        parts.append("}}")
    else:
        parts.append("}")
    joined = _concat(parts)
    if isinstance(joined, str):  # cannot happen (es is always an array); kept for type checkers
        joined = pa.nulls(n, _STRING).fill_null(joined)
    values: list[bytes | None] = joined.cast(pa.binary()).to_numpy(zero_copy_only=False).tolist()
    keys_out: list[bytes | None] = [b""] * n  # canal-json messages have no key
    if not full.all():
        for i in np.flatnonzero(~full).tolist():
            values[i] = keys_out[i] = None
    return keys_out, values
