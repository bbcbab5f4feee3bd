"""Names as path elements (changefeed/files/paths.py): exact round trip, no collisions, never outside the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from changefeed.errors import SinkError
from changefeed.files.paths import (
    NAME_MAX,
    PathEscapeError,
    UnsafeNameError,
    decode_name,
    encode_name,
    join_under,
    table_label,
)

RESERVED = frozenset({"metadata", "_spark_checkpoint"})
#: Any code point, lone surrogates and the escape-prone ones included.
any_char = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=()) | st.sampled_from(
    ["/", "\\", "@", ".", "\x00", "\ud800", "\udfff", "\x7f", "\x9b", "😀", "-", "$"]
)
names = st.text(any_char, min_size=1, max_size=40) | st.sampled_from(sorted(RESERVED)) | st.sampled_from([".", ".."])
#: What TiCDC users have: letters (any script), digits, ``_``, ``$``, ``-``, spaces and inner dots.
ordinary = st.text(
    st.characters(whitelist_categories=("Lu", "Ll", "Lo", "Nd"), max_codepoint=0x10FFFF) | st.sampled_from("_$- ."),
    min_size=1,
    max_size=64,
).filter(lambda s: not s.startswith(".") and s not in RESERVED)


@given(names)
def test_decode_inverts_encode(name: str) -> None:
    assert decode_name(encode_name(name, RESERVED), RESERVED) == name


@given(names, names)
def test_distinct_names_never_share_an_element(a: str, b: str) -> None:
    if a != b:
        assert encode_name(a, RESERVED) != encode_name(b, RESERVED)


@given(names)
def test_an_encoded_name_is_one_safe_path_element(name: str) -> None:
    element = encode_name(name, RESERVED)
    assert element not in ("", ".", "..") and not element.startswith(".") and element not in RESERVED
    assert not any(ch in element for ch in "/\\\x00") and all(ord(ch) >= 0x20 for ch in element)
    element.encode()  # no lone surrogate: every element is a valid UTF-8 file name


@given(ordinary)
def test_ordinary_names_keep_ticdc_raw_paths(name: str) -> None:
    assert encode_name(name, RESERVED) == name


@pytest.mark.parametrize(
    ("name", "element"),
    [
        ("test", "test"),
        ("orders_01", "orders_01"),
        ("db_ü", "db_ü"),
        ("a$b", "a$b"),
        ("-x", "-x"),
        ("v1.2", "v1.2"),
        ("表", "表"),
        ("😀", "😀"),  # above U+FFFF: safe in a UTF-8 name, so kept (never escaped)
        (".", "@002e"),
        ("..", "@002e."),
        (".hidden", "@002ehidden"),
        ("/abs", "@002fabs"),
        ("a/b", "a@002fb"),
        ("a\\b", "a@005cb"),
        ("a@b", "a@0040b"),
        ("x\x00y", "x@0000y"),
        ("tab\there", "tab@0009here"),
        ("\ud800", "@d800"),
        ("../../esc", "@002e.@002f..@002fesc"),
        ("../../../pwn", "@002e.@002f..@002f..@002fpwn"),
        ("metadata", "@006detadata"),  # reserved at the root
    ],
)
def test_examples(name: str, element: str) -> None:
    assert encode_name(name, RESERVED) == element
    assert decode_name(element, RESERVED) == name


def test_reserved_names_are_escaped_only_where_reserved() -> None:
    assert encode_name("metadata") == "metadata"
    assert encode_name("metadata", RESERVED) == "@006detadata"
    with pytest.raises(UnsafeNameError):
        decode_name("@006detadata")  # not canonical without the reservation


def test_empty_name_is_refused() -> None:
    with pytest.raises(UnsafeNameError, match="empty"):
        encode_name("")
    with pytest.raises(UnsafeNameError):
        decode_name("")


@pytest.mark.parametrize(
    "element",
    ["@", "a@b", "@00", "@002F", "@zzzz", "@0041", "@005f", ".x", ".", "..", "a\x00", "a\\b", "metadata", "\udc80"],
)
def test_malformed_elements_are_refused(element: str) -> None:
    """Only encode_name's own output decodes: bad escapes, escapes of kept characters, raw unsafe characters."""
    with pytest.raises(UnsafeNameError, match="not an encoded") as info:
        decode_name(element, RESERVED, where="db/t")
    assert isinstance(info.value, SinkError) and info.value.where == "db/t"


def test_very_long_names_round_trip_but_no_element_passes_name_max(tmp_path: Path) -> None:
    name = "/" * 64  # MySQL's longest identifier, every character escaped: 320 bytes
    element = encode_name(name)
    assert decode_name(element) == name and len(element) == 320
    with pytest.raises(UnsafeNameError, match="longer than 255 bytes"):
        join_under(tmp_path, element, what=table_label(name, "t"))
    assert join_under(tmp_path, "x" * NAME_MAX, what="ok") == tmp_path / ("x" * NAME_MAX)


@pytest.mark.parametrize("element", ["..", ".", "", "/abs", "a/b", "a\x00"])
def test_join_under_refuses_raw_elements(tmp_path: Path, element: str) -> None:
    with pytest.raises(PathEscapeError, match=r"table 's'\.'t'"):
        join_under(tmp_path, element, "f", what=table_label("s", "t"))


def test_join_under_refuses_a_link_out_of_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside, root / "db")
    with pytest.raises(PathEscapeError, match="outside"):
        join_under(root, "db", "t", what="db.t")
    assert join_under(root, "db2", "t", what="db2.t") == root / "db2" / "t"


def test_join_under_accepts_a_root_behind_a_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert join_under(tmp_path / "link", "db", what="db") == tmp_path / "link" / "db"
