"""Schema and table names from the data as path elements that cannot leave the output root.

TiCDC's storage sink writes ``<root>/<schema>/<table>/...`` with the raw names, and MySQL/MariaDB
accept nearly any character in a quoted identifier: ``CREATE DATABASE `../../esc``` is legal, so a
raw name can climb out of the root, replace it (a leading ``/``), or split into two directories
(```a/b`.`c``` and ```a`.`b/c``` would share ``a/b/c``). MySQL itself stores such names with its
"filename-safe" encoding: ``[A-Za-z0-9_]`` kept, every other character written as ``@`` and four
lowercase hex digits of its code point (``/`` -> ``@002f``), plus three-character ``@`` codes
for some Latin letters.

The rule here (`encode_name`) keeps TiCDC's raw paths for ordinary names and borrows MySQL's
``@xxxx`` form only for what is unsafe in one path element:

* ``/`` and ``\\`` (the POSIX and the Windows separator), and ``@`` itself (so decoding is exact);
* control characters (Unicode ``Cc``: U+0000-U+001F, U+007F-U+009F): NUL cannot be in a path at
  all, and the others make listings lie or drive a terminal;
* lone surrogates (U+D800-U+DFFF): no UTF-8 file name can hold them;
* the first character of a name that starts with ``.`` (so ``.`` and ``..`` never reach the file
  system, and no name becomes a hidden entry or meets the sinks' ``.<file>.tmp<pid>`` files), or
  that equals a name the caller reserves (an entry the sink keeps beside the names, such as the
  storage root's ``metadata``).

Everything else is kept: letters, digits, ``_``, ``$``, ``-``, spaces, ``.`` after the first
character, non-ASCII letters, characters above U+FFFF. Every escaped character is in the Basic
Multilingual Plane, so four hex digits always suffice: a code point above U+FFFF is kept as it
is (it is safe in a UTF-8 file name) and never needs a longer form. A leading ``-`` is kept: it is
safe as a path element (only a command line may read it as an option) and TiCDC writes it.

Where this differs: from MySQL, in keeping every safe character raw (as TiCDC does) and in
escaping ``.`` only in the first position; from TiCDC, for names holding the characters above,
starting with ``.`` or equal to a reserved name. An empty name is refused (MySQL has none; it would
vanish from the path). `decode_name` accepts only what `encode_name` produces, so a TiCDC
directory whose raw names contain ``@`` not followed by four lowercase hex digits is an error.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path

from ..errors import SinkError

#: Longest path element most file systems take (Linux NAME_MAX, in bytes).
NAME_MAX = 255
_ESCAPE = re.compile(r"@([0-9a-f]{4})")
_UNSAFE = re.compile(r"[/\\@\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class UnsafeNameError(SinkError):
    """A name cannot become a path element, or a path element is not an encoded name."""


class PathEscapeError(SinkError):
    """A path built from names would leave the root it must stay under."""


def _escape(ch: str) -> str:
    return f"@{ord(ch):04x}"


@lru_cache(maxsize=8192)
def _encode(name: str, reserved: frozenset[str]) -> str:
    if not name:
        raise UnsafeNameError("an empty name cannot be a path element")
    if name[0] == "." or name in reserved:
        return _escape(name[0]) + _UNSAFE.sub(lambda m: _escape(m.group()), name[1:])
    return _UNSAFE.sub(lambda m: _escape(m.group()), name)


def encode_name(name: str, reserved: Collection[str] = frozenset()) -> str:
    """One schema or table name as one path element (the module's rule); ordinary names unchanged."""
    return _encode(name, reserved if isinstance(reserved, frozenset) else frozenset(reserved))


def decode_name(element: str, reserved: Collection[str] = frozenset(), *, where: str | None = None) -> str:
    """The name `encode_name` made ``element`` from; UnsafeNameError unless ``element`` is exactly that form.

    Only the canonical form is accepted (decoding then encoding gives ``element`` back), so no two
    elements name the same table.
    """
    name = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), element)
    try:
        canonical = encode_name(name, reserved)
    except UnsafeNameError:
        canonical = None
    if canonical != element:
        raise UnsafeNameError(f"path element {element!r} is not an encoded schema or table name", where=where)
    return name


def table_label(schema: str, table: str = "") -> str:
    """A name for errors: repr() quoting shows control characters instead of sending them."""
    return f"table {schema!r}.{table!r}" if table else f"schema {schema!r}"


def join_under(root: Path, *elements: str, what: str) -> Path:
    """``root`` joined with ``elements`` (one path element each), refused unless it resolves under ``root``.

    ``what`` names the schema/table in the error. Symbolic links are followed when resolving, so a
    link inside the root cannot lead a write outside it either.
    """
    for element in elements:
        if element in ("", ".", "..") or "/" in element or "\x00" in element:
            raise PathEscapeError(f"{what}: {element!r} is not a single path element", where=str(root))
        if len(element.encode("utf-8", "surrogatepass")) > NAME_MAX:
            raise UnsafeNameError(
                f"{what}: the path element {element[:40]!r}... is longer than {NAME_MAX} bytes", where=str(root)
            )
    path = root.joinpath(*elements)
    base = root.resolve()
    resolved = path.resolve()
    if resolved == base or not resolved.is_relative_to(base):
        raise PathEscapeError(f"{what}: {path} resolves to {resolved}, outside {base}", where=str(root))
    return path
