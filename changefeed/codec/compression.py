"""Large-message compression (``large-message-handle-compression``, spec §0.7), for every protocol.

TiCDC writes the raw Snappy *block* format and the LZ4 *frame* format; pyarrow (a project
dependency) has both, so no separate snappy/lz4 package is needed. Nothing in a message says it
is compressed: the decoder must be given the same option. What is compressed differs per
protocol (Open Protocol: each event value; canal-json and simple: the whole value), so codecs
call these functions where their format says.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError

Transform = Callable[[bytes], bytes]

MAX_INFLATED = 1 << 28
"""Refuse to inflate hostile input beyond 256 MiB."""
_SNAPPY_MAX_RATIO = 32  # a Snappy block cannot expand much beyond ~21:1 (3-byte copy of 64 bytes)
_VARINT_MAX_BYTES = 5  # the block's uncompressed length is a uint32 varint


def compression_codec(name: str) -> tuple[Transform, Transform] | None:
    """(compress, decompress) for ``large-message-handle-compression``, or None for ``none``.

    The decompressor raises ValueError (its text names the format) on corrupt input or input
    that claims to inflate absurdly; codecs wrap it in their own `CodecError`.
    """
    if name == "none":
        return None
    if name not in ("snappy", "lz4"):
        raise ConfigError(f"unknown large-message-handle-compression {name!r}")
    try:
        import pyarrow as pa  # noqa: PLC0415 - heavy import, only when compression is configured
    except ImportError:  # pragma: no cover - pyarrow is a declared dependency
        raise ConfigError(f"large-message-handle-compression={name} needs pyarrow, which is not installed") from None
    if not pa.Codec.is_available(name):  # pragma: no cover - depends on the pyarrow build
        raise ConfigError(f"large-message-handle-compression={name}: this pyarrow build has no {name} codec")
    codec = pa.Codec(name)  # "snappy": raw block; "lz4": LZ4 frame
    failures: tuple[type[BaseException], ...] = (pa.lib.ArrowException, OSError, ValueError, EOFError)

    def compress(data: bytes) -> bytes:
        return codec.compress(data, asbytes=True)

    def unsnappy(data: bytes) -> bytes:
        size = snappy_length(data)
        if size > len(data) * _SNAPPY_MAX_RATIO + 64 or size > MAX_INFLATED:
            raise ValueError(f"snappy block claims {size} bytes from {len(data)}: corrupt")
        try:
            out = codec.decompress(data, decompressed_size=size, asbytes=True)
        except failures as exc:
            raise ValueError(f"snappy block does not decompress: {exc}") from None
        if len(out) != size:
            raise ValueError(f"snappy block gave {len(out)} bytes, its header said {size}")
        return out

    def unlz4(data: bytes) -> bytes:
        try:
            out = pa.input_stream(pa.py_buffer(data), compression="lz4").read(MAX_INFLATED + 1)
        except failures as exc:
            raise ValueError(f"lz4 frame does not decompress: {exc}") from None
        if len(out) > MAX_INFLATED:
            raise ValueError(f"lz4 frame inflates beyond {MAX_INFLATED} bytes")
        return bytes(out)

    return compress, (unsnappy if name == "snappy" else unlz4)


def snappy_length(data: bytes) -> int:
    """The uncompressed length: a little-endian base-128 varint at the start of a Snappy block."""
    size = shift = 0
    for byte in data[:_VARINT_MAX_BYTES]:
        size |= (byte & 0x7F) << shift
        if byte < 0x80:
            return size
        shift += 7
    raise ValueError("snappy block without a valid length header")
