"""Fast paths for Go's JSON float numbers (spec §0.5) on the encoder's hot path.

`changefeed.model.gofloat.format_json` is the reference; these give the same text for the common
magnitudes ([1e-4, 1e16)) several times faster, and defer to it for everything else.
"""

from __future__ import annotations

import numpy as np

from ...model.gofloat import format_json

_np_float32 = np.float32


def json_float64(v: float) -> str:
    """Go JSON text of a float64: Python's repr has the same shortest digits and, on [1e-4, 1e16),
    the same fixed layout except for a trailing ``.0``."""
    if 1e-4 <= abs(v) < 1e16:
        r = repr(v)
        return r[:-2] if r.endswith(".0") else r
    return format_json(v)


def json_float32(v: float) -> str:
    """Go JSON text of a float32 (``v`` already holds an exact float32 value).

    numpy's ``str`` of a float32 prints the shortest round-trip digits (Dragon4, as the reference
    does); where it chooses positional notation it matches Go's fixed layout except for a
    trailing ``.0``. Exponent forms and other magnitudes go to the reference implementation.
    """
    if 1e-4 <= abs(v) < 1e16:
        s = str(_np_float32(v))
        if "e" not in s:
            return s[:-2] if s.endswith(".0") else s
    return format_json(v, True)
