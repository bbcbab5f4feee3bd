"""Row blocks through `StorageEncoder` give the segments of the same rows one by one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from changefeed.capture.binlog import BinlogPosition
from changefeed.capture.binlog.blocks import BlockCapture
from changefeed.capture.binlog.files import BinlogFileReader
from changefeed.codec import CodecOptions
from changefeed.model import RowChange
from changefeed.model.rowblock import RowBlock, expand_blocks
from changefeed.sink.storage.writer import StorageEncoder, StorageOptions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "binlog"


def _blocks(path: Path, block_rows: int) -> list[Any]:
    opener = lambda at: BinlogFileReader(path, at.file or None, at.pos)  # noqa: E731
    return list(BlockCapture(opener, BinlogPosition("binlog.000001", 4), block_rows=block_rows).blocks())


@pytest.mark.parametrize(
    "codec",
    [
        CodecOptions(protocol="canal-json", clock=lambda: 0),
        CodecOptions(protocol="canal-json", enable_tidb_extension=True, clock=lambda: 0),
        CodecOptions(protocol="csv"),
    ],
    ids=["canal-json", "canal-json-tidb", "csv"],
)
@pytest.mark.parametrize("use_table_id", [False, True])
def test_blocks_encode_like_rows(codec: CodecOptions, use_table_id: bool) -> None:
    options = StorageOptions(use_table_id_as_path=use_table_id)
    for variant in ("full", "nocrc"):
        for block_rows in (2, 65536):
            blocks = _blocks(FIXTURES / variant, block_rows)
            assert any(isinstance(b, RowBlock) for b in blocks)
            rows = list(expand_blocks(blocks))
            middle = [e.commit_ts for e in rows if isinstance(e, RowChange)][10]
            for checkpoint in (0, middle):
                want = list(StorageEncoder(codec, options).encode(rows, checkpoint))
                got = list(StorageEncoder(codec, options).encode(blocks, checkpoint))
                assert got == want
                assert sum(getattr(i, "rows", 0) for i in got) > 0
