"""A job's state files beside its checkpoint (changefeed/files/store.py): on a local disk, through pyarrow's
local filesystem, and on a real S3 endpoint (s3rver), each the same contract."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from changefeed.errors import ChangefeedError
from changefeed.files.batchstate import BatchState
from changefeed.files.store import (
    ArrowStore,
    LocalStore,
    StateStore,
    checkpoint_location,
    is_uri,
    local_path,
    open_store,
)
from changefeed.testing.s3 import S3Server

log = logging.getLogger(__name__)


@pytest.fixture(params=["local", "arrow-local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StateStore:
    if request.param == "local":
        return open_store(tmp_path / "ckpt")
    if request.param == "arrow-local":
        return ArrowStore((tmp_path / "ckpt").as_uri())  # pyarrow's code path over this disk
    server: S3Server = request.getfixturevalue("s3_server")
    server.create_bucket("ckpt")
    # s3rver predates the SDK's default checksum trailers (it would store the aws-chunked framing).
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    monkeypatch.setenv("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
    prefix = os.urandom(4).hex()
    return open_store(
        f"s3a://S3RVER:S3RVER@ckpt/{prefix}/job?endpoint_override={server.host}:{server.port}&scheme=http"
        "&region=us-east-1"
    )


def test_write_read_replace_list_delete(store: StateStore) -> None:
    assert store.read("state.json") is None and store.names() == [] and not store.exists()
    store.write("state.json", b"one")
    store.write("state.json", b"two")  # replaced whole
    store.write("merge-000000000001.jsonl", b"x" * 100_000)
    assert store.read("state.json") == b"two"
    assert store.read("merge-000000000001.jsonl") == b"x" * 100_000
    assert store.names() == ["merge-000000000001.jsonl", "state.json"] and store.exists()
    child = store.child("offsets")
    child.write("0", b"v1\n{}")
    assert child.names() == ["0"] and "offsets" in store.names()
    store.delete("state.json")
    store.delete("state.json")  # gone already: nothing to do
    assert store.read("state.json") is None and "state.json" not in store.names()


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "a\\b", "x\0y"])
def test_names_stay_inside(store: StateStore, name: str) -> None:
    with pytest.raises(ValueError, match="not a state file name"):
        store.write(name, b"x")
    with pytest.raises(ValueError, match="not a state file name"):
        store.child(name)


def test_batch_state_through_any_store(store: StateStore) -> None:
    saved = BatchState(store)
    saved.save(0, {"a": 1})
    saved.save(1, {"a": 2})
    again = BatchState(store)  # a restart (on another host: the same location)
    assert again.for_batch(1) == {"a": 1} and again.for_batch(2) == {"a": 2}


def test_a_move_cut_short_leaves_the_complete_copy_to_read(tmp_path: Path) -> None:
    # An object store's move is a copy then a delete: a crash between replacing and deleting can
    # leave the file missing and its complete temporary copy, which `read` and `names` take.
    store = ArrowStore((tmp_path / "ckpt").as_uri())
    store.write("state.json", b"new")
    os.rename(tmp_path / "ckpt" / "state.json", tmp_path / "ckpt" / ".tmp-state.json")
    assert store.read("state.json") == b"new" and store.names() == ["state.json"]


def test_the_local_store_is_private_and_durable(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "a" / "ckpt")
    store.write("x", b"1")
    assert stat.S_IMODE((tmp_path / "a" / "ckpt").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) != 0o700  # parents keep default permissions
    assert [p.name for p in (tmp_path / "a" / "ckpt").iterdir()] == ["x"]  # no temporary left


def test_locations() -> None:
    assert not is_uri("/data/ckpt") and not is_uri("ckpt") and not is_uri("C:\\x")
    assert is_uri("hdfs://nn:8020/ckpt") and is_uri("file:///data/ckpt") and is_uri("s3a://b/k")
    assert local_path("file:///data/ckpt") == Path("/data/ckpt") and local_path("hdfs://nn/ckpt") is None
    assert checkpoint_location("rel/ckpt") == Path.cwd() / "rel" / "ckpt"
    assert checkpoint_location("file:///data/ckpt/") == Path("/data/ckpt")
    assert checkpoint_location("hdfs://nn:8020/ckpt/") == "hdfs://nn:8020/ckpt"


def test_a_secret_in_the_uri_never_shows(tmp_path: Path) -> None:
    with pytest.raises(ChangefeedError) as caught:
        open_store("s3://KEY:hunter2@bucket/x?endpoint_override=127.0.0.1:1&scheme=http").write("a", b"1")
    assert "hunter2" not in str(caught.value)
    store = ArrowStore("s3://KEY:hunter2@bucket/x?endpoint_override=127.0.0.1:1&scheme=http")
    assert "hunter2" not in store.where and "hunter2" not in store.child("y").where
