"""docs/migration.md runs as written: its SQL on a source MariaDB, its commands against a second one.

The page's blocks are taken in order: ```sql blocks run on the upstream, ```bash lines are
`changefeed` commands (run in-process with the two servers' addresses in place of the page's
127.0.0.1:3306 / 127.0.0.1:3307), a bare ``` block is the output the command before it must print,
and the ```toml block must be examples/shards.toml (the file the commands use).
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from changefeed.cli import main
from changefeed.testing import MariaDBServer
from tests.mariadb_client import client_rows

pytestmark = [pytest.mark.mariadb, pytest.mark.spark, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def test_the_sharded_migration_page_runs_as_written(
    spark: object,
    mariadb_factory: Callable[..., MariaDBServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream, downstream = mariadb_factory(), mariadb_factory()
    urls = {"mysql://root@127.0.0.1:3306": upstream.url, "mysql://root@127.0.0.1:3307": downstream.url}

    def local(text: str) -> str:
        for written, real in urls.items():
            text = text.replace(written, real)
        return text

    example = (ROOT / "examples" / "shards.toml").read_text()
    config = tmp_path / "examples" / "shards.toml"
    config.parent.mkdir()
    config.write_text(local(example))
    monkeypatch.chdir(tmp_path)  # the page's relative path, and the run's default checkpoint, live here
    blocks = BLOCK.findall((ROOT / "docs" / "migration.md").read_text())
    assert [lang for lang, _ in blocks] == ["sql", "toml", "bash", "sql", "bash", "bash", ""]
    printed = ""
    for lang, body in blocks:
        if lang == "sql":
            with upstream.connect() as conn, conn.cursor() as cur:
                for statement in filter(None, (s.strip() for s in body.split(";"))):
                    cur.execute(statement)
                conn.commit()
        elif lang == "toml":
            assert tomllib.loads(body) == tomllib.loads(example), "the page's config is examples/shards.toml"
        elif lang == "bash":
            for line in body.strip().splitlines():
                argv = shlex.split(local(line))
                assert argv[0] == "changefeed"
                assert main(argv[1:]) == 0, capsys.readouterr()
                printed = capsys.readouterr().out
        else:
            assert printed == body, f"the page shows:\n{body}\nthe command printed:\n{printed}"
    rows = client_rows(downstream, "SELECT c_schema, id, customer, channel FROM shop.orders ORDER BY c_schema, id")
    assert rows[0] == ["01", "1", "ada", "NULL"] and ["04", "4", "ivy", "app"] in rows
