"""Large-message compression (``large-message-handle-compression``, spec §0.7), for every protocol.

TiCDC writes the raw Snappy *block* format and the LZ4 *frame* format; pyarrow (a project
dependency) has both, so no separate snappy/lz4 package is needed. Nothing in a message says it
is compressed: the decoder must be given the same option. What is compressed differs per
protocol (Open Protocol: each event value; canal-json and simple: the whole value), so codecs
call these functions where their format says.

Decoders inflate through an `Inflater`, which bounds what one *message* inflates to, summed over
its values (a claim-check file counting as part of the message that names it): a bound per value
would let one message of many small values inflate to many times it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError
from .options import DEFAULT_MAX_MESSAGE_BYTES

Transform = Callable[[bytes], bytes]
Inflate = Callable[..., bytes]
"""(compressed[, limit]) -> the inflated bytes; `InflateLimitError` when they would exceed ``limit``."""

INFLATE_FACTOR = 16
"""A message inflates to at most this many times max-message-bytes (160 MiB at TiCDC's default
10 MiB). Row JSON compresses ~2-6x with LZ4/Snappy; 16x leaves room for very repetitive rows while
keeping a hostile message (LZ4 reaches ~255x) to a bounded, predictable allocation."""
DEFAULT_INFLATE_LIMIT = INFLATE_FACTOR * DEFAULT_MAX_MESSAGE_BYTES
_SNAPPY_MAX_RATIO = 32  # a Snappy block cannot expand much beyond ~21:1 (3-byte copy of 64 bytes)
_VARINT_MAX_BYTES = 5  # the block's uncompressed length is a uint32 varint
_FIRST_READ = 64 << 10  # LZ4 frames are read in growing pieces: small values cost one small read
_MAX_READ = 16 << 20


class InflateLimitError(ValueError):
    """Compressed input would inflate beyond the bytes allowed."""


def compression_codec(name: str) -> tuple[Transform, Inflate] | None:
    """(compress, inflate) for ``large-message-handle-compression``, or None for ``none``.

    The inflater raises ValueError (its text names the format) on corrupt input, and
    `InflateLimitError` on input that would inflate beyond its limit; codecs wrap both in their
    own `CodecError`. Decoders use it through `Inflater`.
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
        out: bytes = codec.compress(data, asbytes=True)
        return out

    def unsnappy(data: bytes, limit: int = DEFAULT_INFLATE_LIMIT) -> bytes:
        size = snappy_length(data)
        if size > len(data) * _SNAPPY_MAX_RATIO + 64:
            raise ValueError(f"snappy block claims {size} bytes from {len(data)}: corrupt")
        if size > limit:
            raise InflateLimitError(f"snappy block inflates to {size} bytes, over {limit}")
        try:
            out: bytes = codec.decompress(data, decompressed_size=size, asbytes=True)
        except failures as exc:
            raise ValueError(f"snappy block does not decompress: {exc}") from None
        if len(out) != size:
            raise ValueError(f"snappy block gave {len(out)} bytes, its header said {size}")
        return out

    def unlz4(data: bytes, limit: int = DEFAULT_INFLATE_LIMIT) -> bytes:
        try:
            return _read_bounded(pa.input_stream(pa.py_buffer(data), compression="lz4"), len(data), limit)
        except InflateLimitError:
            raise
        except failures as exc:
            raise ValueError(f"lz4 frame does not decompress: {exc}") from None

    return compress, (unsnappy if name == "snappy" else unlz4)


def _read_bounded(stream: object, compressed: int, limit: int) -> bytes:
    """Read a decompressing stream to its end, never holding more than ``limit`` + 1 bytes of it."""
    chunks: list[bytes] = []
    total = 0
    want = max(_FIRST_READ, 4 * compressed)
    while True:
        n = min(want, limit + 1 - total)
        chunk = stream.read(n)  # type: ignore[attr-defined]  # fills n bytes unless the stream ends
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise InflateLimitError(f"lz4 frame inflates beyond {limit} bytes")
        if len(chunk) < n:
            return b"".join(chunks)
        want = min(2 * want, _MAX_READ)


def snappy_length(data: bytes) -> int:
    """The uncompressed length: a little-endian base-128 varint at the start of a Snappy block."""
    size = shift = 0
    for byte in data[:_VARINT_MAX_BYTES]:
        size |= (byte & 0x7F) << shift
        if byte < 0x80:
            return size
        shift += 7
    raise ValueError("snappy block without a valid length header")


class Inflater:
    """A decoder's decompressor with one message's budget: `INFLATE_FACTOR` x max-message-bytes.

    Call `new_message` before a message's first value; every value inflated until the next call
    (its claim-check file's too) draws on the same budget.
    """

    __slots__ = ("_inflate", "left", "limit", "max_message_bytes", "method")

    def __init__(self, method: str, inflate: Inflate, max_message_bytes: int) -> None:
        self.method = method
        self.max_message_bytes = max_message_bytes
        self.limit = INFLATE_FACTOR * max_message_bytes
        self.left = self.limit
        self._inflate = inflate

    def new_message(self) -> None:
        self.left = self.limit

    def __call__(self, data: bytes) -> bytes:
        """``data`` inflated; ValueError on corrupt input or when the message's budget runs out."""
        try:
            out = self._inflate(data, self.left)
        except InflateLimitError:
            raise InflateLimitError(
                f"{self.method} values of this message inflate beyond {self.limit} bytes "
                f"({INFLATE_FACTOR} x max-message-bytes {self.max_message_bytes})"
            ) from None
        self.left -= len(out)
        return out


def inflater(name: str, max_message_bytes: int) -> Inflater | None:
    """The `Inflater` for ``large-message-handle-compression`` ``name``, or None for ``none``."""
    codec = compression_codec(name)
    return None if codec is None else Inflater(name, codec[1], max_message_bytes)
