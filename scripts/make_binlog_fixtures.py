"""Generate the binlog fixture files in tests/fixtures/binlog/ from a private, self-started MariaDB.

    .venv/bin/python scripts/make_binlog_fixtures.py

``full/``  : the workload of tests/capture/workload.py (every type family, DDL mid-stream, a
             rotation), CRC32 checksums, binlog_row_metadata=FULL.
``nocrc/`` : the same workload with binlog_checksum=NONE.
File-mode tests and the README demo read these, so they need no server. Commit the result.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from changefeed.testing.mariadb import MariaDBServer  # noqa: E402
from tests.capture.workload import SCHEMA, run_workload  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "binlog"


def generate(name: str, extra: dict[str, str]) -> None:
    target = OUT / name
    with MariaDBServer(server_id=1, extra_config=extra, name=f"fixtures-{name}") as server:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {SCHEMA}")
            run_workload(conn)
            cur.execute("FLUSH BINARY LOGS")  # close the last file with a ROTATE
        server._shutdown()
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        names = [line.strip() for line in (server.binlog_dir / "binlog.index").read_text().splitlines() if line]
        kept = []
        for line in names:
            src = server.binlog_dir / Path(line).name
            shutil.copyfile(src, target / src.name)
            kept.append(f"./{src.name}")
        (target / "binlog.index").write_text("\n".join(kept) + "\n")
    size = sum(p.stat().st_size for p in target.iterdir())
    print(f"{target.relative_to(ROOT)}: {len(kept)} files, {size} bytes")


def main() -> int:
    generate("full", {})
    generate("nocrc", {"binlog_checksum": "NONE"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
