"""Reading a test server back with MariaDB's own command-line client: the independent reader."""

from __future__ import annotations

import os
import shutil
import subprocess

from changefeed.testing import MariaDBServer


def client_output(server: MariaDBServer, sql: str) -> str:
    """What ``mariadb -N -B -e SQL`` prints (tab-separated, no headers, NULL as the text NULL)."""
    client = shutil.which("mariadb") or shutil.which("mysql")
    assert client, "the mariadb client (Debian package mariadb-client) is part of the test environment"
    # The password through the environment, never in the process arguments.
    env = {**os.environ, "MYSQL_PWD": server.password}
    argv = [client, "--no-defaults", "--protocol=tcp", "-h", server.host, "-P", str(server.port)]
    argv += ["-u", server.user, "--batch", "--skip-column-names", "-e", sql]
    return subprocess.run(argv, env=env, check=True, capture_output=True, text=True, timeout=60).stdout


def client_rows(server: MariaDBServer, sql: str) -> list[list[str]]:
    """The rows of ``sql`` as the client prints them, each split at its tabs."""
    return [line.split("\t") for line in client_output(server, sql).splitlines()]
