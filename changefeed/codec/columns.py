"""Vectorised helpers shared by the codecs' column renderers (``*/columns.py``).

Why one place: the rules below are TiDB's or Arrow's, not a protocol's, and every columnar
encoder needs them the same way.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Arrow's decimal text in exponent form: sign, the first digit, the other digits, "E-n".
_EXPONENT = r"^(?P<sign>-?)(?P<head>[0-9])\.?(?P<tail>[0-9]*)E"


def value_bytes(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets from 0 as int64, the bytes they span) of a (large) string or binary array, honouring its slice."""
    n = len(values)
    wide = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    dtype = np.int64 if wide else np.int32
    _, offsets_buf, data_buf = values.buffers()[:3]
    offsets = np.frombuffer(offsets_buf, dtype, n + 1, dtype().itemsize * values.offset).astype(np.int64)
    start, end = (int(offsets[0]), int(offsets[-1])) if n else (0, 0)
    if end == start or data_buf is None:
        return offsets - start, np.zeros(0, np.uint8)
    return offsets - start, np.frombuffer(data_buf, np.uint8, end - start, start)


def decimal_texts(values: pa.Array) -> pa.Array:
    """TiDB's ``MyDecimal.String()`` of a decimal array: plain digits, exactly its scale's fraction digits.

    Arrow's text, except where Arrow writes an exponent (an adjusted exponent below -6, so the
    value is below 1e-6 and its integer part 0): there the digits are the unscaled value, padded
    to the scale.
    """
    texts = pc.cast(values, pa.string())
    if not bool((value_bytes(texts)[1] == ord("E")).any()):
        return texts
    sci = pc.match_substring(texts, "E").fill_null(False)
    parts = pc.extract_regex(texts.filter(sci), _EXPONENT)
    digits = pc.binary_join_element_wise(parts.field("head"), parts.field("tail"), "")
    padded = pc.utf8_lpad(digits, width=values.type.scale, padding="0")
    plain = pc.binary_join_element_wise(parts.field("sign"), "0.", padded, "")
    return pc.replace_with_mask(texts, sci, plain)


__all__ = ["decimal_texts", "value_bytes"]
