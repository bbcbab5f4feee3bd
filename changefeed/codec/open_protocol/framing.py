"""Open Protocol's batch framing (spec §1.1).

Key   = u64be(1) ‖ u64be(len(k1)) ‖ k1 ‖ u64be(len(k2)) ‖ k2 ‖ …
Value =            u64be(len(v1)) ‖ v1 ‖ u64be(len(v2)) ‖ v2 ‖ …
"""

from __future__ import annotations

import struct

BATCH_VERSION = 1
VERSION_HEADER = struct.pack(">Q", BATCH_VERSION)
U64 = struct.Struct(">Q")
# tiflow/ticdc common.MaxRecordOverhead: Kafka's per-record overhead in the size accounting.
MAX_RECORD_OVERHEAD = 36


def frame_single(key: bytes, value: bytes) -> tuple[bytes, bytes]:
    """A one-event message: what a DDL, resolved or claim-check file carries."""
    return VERSION_HEADER + U64.pack(len(key)) + key, U64.pack(len(value)) + value


def frame_lists(key: bytes | None, value: bytes | None) -> tuple[list[bytes], list[bytes]]:
    """The keys and the values of `split_frames`, walked without a check per event.

    Lengths are unsigned, so both cursors only grow: a walk that ends exactly at both ends never
    overran; any other ending (or a truncated prefix) is walked again by `split_frames`, which
    raises the error naming the event. ~0.2 µs an event less for the apply job's block decoder.
    """
    if key is not None and value is not None and key[:8] == VERSION_HEADER:
        unpack = U64.unpack_from
        keys: list[bytes] = []
        values: list[bytes] = []
        add_key, add_value = keys.append, values.append
        kend, vend = len(key), len(value)
        kpos, vpos = 8, 0
        try:
            while kpos < kend:
                start = kpos + 8
                kpos = start + unpack(key, kpos)[0]
                add_key(key[start:kpos])
                start = vpos + 8
                vpos = start + unpack(value, vpos)[0]
                add_value(value[start:vpos])
        except (struct.error, OverflowError):  # a truncated prefix; a length beyond a slice index
            pass
        else:
            if kpos == kend and vpos == vend:
                return keys, values
    pairs = split_frames(key, value)
    return [k for k, _ in pairs], [v for _, v in pairs]


def split_frames(key: bytes | None, value: bytes | None) -> list[tuple[bytes, bytes]]:
    """Walk key and value in lockstep (as TiCDC's Go decoder does); ValueError names the event.

    Unlike the Java demo (which stops at the end of the key), a value with entries left over,
    or a key without a matching value entry, is corrupt. A bare version header gives no pairs.
    """
    if key is None:
        raise ValueError("the message has no key (Open Protocol keys carry the event headers)")
    value = value or b""
    klen_total, vlen_total = len(key), len(value)
    if klen_total < 8:
        raise ValueError(f"key is {klen_total} bytes, shorter than the 8-byte version header")
    version = U64.unpack_from(key, 0)[0]
    if version != BATCH_VERSION:
        raise ValueError(f"unsupported batch version {version} in the key header (expected {BATCH_VERSION})")
    pairs: list[tuple[bytes, bytes]] = []
    kpos, vpos = 8, 0
    while kpos < klen_total:
        n = len(pairs) + 1
        left = klen_total - kpos
        if left < 8:
            raise ValueError(f"event {n}: key length prefix truncated ({left} bytes left in the key)")
        klen = U64.unpack_from(key, kpos)[0]
        kpos += 8
        if klen > klen_total - kpos:
            raise ValueError(f"event {n}: key length {klen} overruns the key ({klen_total - kpos} bytes left)")
        k = key[kpos : kpos + klen]
        kpos += klen
        left = vlen_total - vpos
        if left == 0:
            raise ValueError(f"event {n}: the value has no entry for this key (more keys than values)")
        if left < 8:
            raise ValueError(f"event {n}: value length prefix truncated ({left} bytes left in the value)")
        vlen = U64.unpack_from(value, vpos)[0]
        vpos += 8
        if vlen > vlen_total - vpos:
            raise ValueError(f"event {n}: value length {vlen} overruns the value ({vlen_total - vpos} bytes left)")
        pairs.append((k, value[vpos : vpos + vlen]))
        vpos += vlen
    if vpos != vlen_total:
        raise ValueError(
            f"the value has {vlen_total - vpos} bytes left after {len(pairs)} events (more values than keys)"
        )
    # A key that is only the version header holds zero events: TiCDC's decoder yields none (its
    # own test data has such messages), so this is not an error.
    return pairs
