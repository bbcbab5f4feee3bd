"""`CodecOptions` lists its fields once: CLI flags, Spark data source options and TiCDC keys come from it."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace

from hypothesis import given
from hypothesis import strategies as st

from changefeed.codec import CodecOptions
from changefeed.spark.jobs import storage_source

FIELDS = [f for f in fields(CodecOptions) if f.name != "clock"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    CodecOptions.add_arguments(p)
    return p


def test_every_field_has_a_flag() -> None:
    flags = {a.dest for a in _parser()._actions}
    assert {f.name for f in FIELDS} <= flags


def test_flags_give_the_options() -> None:
    args = _parser().parse_args(
        [
            "--protocol",
            "csv",
            "--delimiter",
            ";",
            "--include-commit-ts",
            "--no-output-old-value",
            "--max-batch-size",
            "3",
        ]
    )
    assert CodecOptions.from_args(args) == CodecOptions(
        protocol="csv", delimiter=";", include_commit_ts=True, output_old_value=False, max_batch_size=3
    )
    defaults = CodecOptions.from_args(_parser().parse_args(["--protocol", "canal-json"]))
    assert defaults == CodecOptions(protocol="canal-json")


options = st.builds(
    CodecOptions,
    protocol=st.sampled_from(["canal-json", "open-protocol", "csv"]),
    compat=st.sampled_from(["ticdc", "tiflow"]),
    max_batch_size=st.integers(1, 64),
    enable_tidb_extension=st.booleans(),
    only_output_updated_columns=st.booleans(),
    output_old_value=st.booleans(),
    content_compatible=st.booleans(),
    encoding_format=st.sampled_from(["json", "avro"]),
    time_zone=st.sampled_from(["UTC", "Asia/Shanghai"]),
    delimiter=st.sampled_from([",", ";", "|"]),
    quote=st.sampled_from(['"', "'", ""]),
    include_commit_ts=st.booleans(),
    binary_encoding_method=st.sampled_from(["base64", "hex"]),
    csv_output_old_value=st.booleans(),
    output_field_header=st.booleans(),
    terminator=st.sampled_from(["\r\n", "\n"]),
)


@given(options)
def test_to_mapping_is_from_mappings_inverse(o: CodecOptions) -> None:
    if o.protocol == "csv":  # csv has its own old-value switch (csv_output_old_value); the other one is not csv's
        o = replace(o, output_old_value=True)
    m = o.to_mapping()
    assert all(isinstance(v, str) for v in m.values())
    assert CodecOptions.from_mapping(m) == o


def test_the_storage_input_gets_every_option_that_differs() -> None:
    # It used to pass a fixed list, losing e.g. content-compatible and only-output-updated-columns.
    o = CodecOptions(protocol="canal-json", content_compatible=True, enable_tidb_extension=True)
    source = storage_source("/tmp/x", o)
    assert source["content-compatible"] == "true" and source["only-output-updated-columns"] == "true"
    assert CodecOptions.from_mapping({k: v for k, v in source.items() if k not in ("input", "path")}) == o
