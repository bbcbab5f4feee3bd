"""How `changefeed.spark.ship` chooses what executors get, and when a packed environment is rebuilt."""

from __future__ import annotations

import importlib.metadata as md
import os
from pathlib import Path

import pytest

from changefeed.errors import ConfigError
from changefeed.spark import ship
from changefeed.spark.ship import (
    EXECUTOR_PYTHON,
    environment_key,
    is_local_master,
    pack_environment,
    plan_shipping,
    runtime_distributions,
)


class _Build:
    """A stand-in for the archive builder that counts its calls."""

    def __init__(self, path: Path) -> None:
        self.path, self.calls = path, 0

    def __call__(self) -> Path:
        self.calls += 1
        return self.path


@pytest.mark.parametrize(
    "master", ["local", "local[2]", "local[*]", "local[4,3]", "local-cluster[2,1,1024]", " local "]
)
def test_local_masters_ship_nothing(master: str, tmp_path: Path) -> None:
    build = _Build(tmp_path / "x.tar.gz")
    shipping = plan_shipping(master, py_env=None, no_ship=False, user_conf={}, build=build)
    assert shipping.conf == {} and shipping.python is None and build.calls == 0
    assert is_local_master(master)


@pytest.mark.parametrize("master", ["spark://10.0.0.1:7077", "yarn", "k8s://https://k8s:6443", "localhost", "local[2"])
def test_cluster_masters_ship_the_packed_environment(master: str, tmp_path: Path) -> None:
    archive = tmp_path / "env.tar.gz"
    build = _Build(archive)
    shipping = plan_shipping(master, py_env=None, no_ship=False, user_conf={}, build=build)
    assert not is_local_master(master)
    assert build.calls == 1
    assert shipping.conf == {"spark.archives": f"{archive}#environment", "spark.pyspark.python": EXECUTOR_PYTHON}
    assert shipping.python == "./environment/bin/python"


def test_no_ship_and_user_interpreter_build_nothing(tmp_path: Path) -> None:
    build = _Build(tmp_path / "env.tar.gz")
    assert plan_shipping("yarn", py_env=None, no_ship=True, user_conf={}, build=build).conf == {}
    mine = {"spark.pyspark.python": "/opt/py/bin/python"}
    assert plan_shipping("yarn", py_env=None, no_ship=False, user_conf=mine, build=build).conf == {}
    assert build.calls == 0


def test_py_env_is_shipped_instead_of_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = _Build(tmp_path / "never.tar.gz")
    prebuilt = tmp_path / "mine.tar.gz"
    prebuilt.write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    shipping = plan_shipping("spark://h:7077", py_env="mine.tar.gz", no_ship=False, user_conf={}, build=build)
    assert shipping.conf["spark.archives"] == f"{prebuilt.resolve()}#environment" and build.calls == 0
    uri = "hdfs:///envs/cf.tar.gz"  # the cluster fetches it; nothing to check here
    shipping = plan_shipping("yarn", py_env=uri, no_ship=False, user_conf={}, build=build)
    assert shipping.conf["spark.archives"] == f"{uri}#environment"


def test_users_own_archives_are_kept(tmp_path: Path) -> None:
    build = _Build(tmp_path / "env.tar.gz")
    conf = {"spark.archives": "hdfs:///data/dict.zip#dict"}
    shipping = plan_shipping("yarn", py_env=None, no_ship=False, user_conf=conf, build=build)
    assert shipping.conf["spark.archives"] == f"hdfs:///data/dict.zip#dict,{tmp_path / 'env.tar.gz'}#environment"


@pytest.mark.parametrize(
    ("py_env", "no_ship", "conf", "message"),
    [
        ("a.tar.gz", True, {}, "contradict"),
        ("missing.tar.gz", False, {}, "no such archive"),
        ("env.whl", False, {}, "Spark unpacks"),
        ("a.tar.gz", False, {"spark.pyspark.python": "/usr/bin/python3"}, "drop --spark-conf"),
    ],
)
def test_inconsistent_options_fail_with_the_fix(
    py_env: str, no_ship: bool, conf: dict[str, str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a.tar.gz", "env.whl"):
        (tmp_path / name).write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=message):
        plan_shipping("yarn", py_env=py_env, no_ship=no_ship, user_conf=conf, build=_Build(tmp_path / "b"))


def _dist(root: Path, name: str, version: str, record: str) -> md.Distribution:
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(record)
    return md.PathDistribution(info)


def test_environment_key_follows_every_shipped_byte(tmp_path: Path) -> None:
    pkg = tmp_path / "src" / "changefeed"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    site = tmp_path / "site"
    dists = [_dist(site, "orjson", "3.10.0", "orjson/__init__.py,sha256=aaa,10\n")]
    key = environment_key(dists, pkg, python="/usr/bin/python3.11")
    assert key == environment_key(dists, pkg, python="/usr/bin/python3.11")
    (pkg / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"cache")  # bytecode is not shipped
    assert environment_key(dists, pkg, python="/usr/bin/python3.11") == key
    assert environment_key(dists, pkg, python="/opt/python3.11") != key  # the interpreter the links point at

    (pkg / "__init__.py").write_text("x = 2\n")
    edited = environment_key(dists, pkg, python="/usr/bin/python3.11")
    (pkg / "new.py").write_text("")
    added = environment_key(dists, pkg, python="/usr/bin/python3.11")
    upgraded = [_dist(site, "orjson", "3.10.0", "orjson/__init__.py,sha256=bbb,10\n")]  # same version, new bytes
    reinstalled = environment_key(upgraded, pkg, python="/usr/bin/python3.11")
    assert len({key, edited, added, reinstalled}) == 4


def test_runtime_closure_has_the_dependencies_and_extras_but_not_spark() -> None:
    import changefeed  # noqa: PLC0415

    names = {
        d.metadata["Name"].lower().replace("_", "-") for d in runtime_distributions(Path(changefeed.__file__).parent)
    }
    assert {"changefeed", "orjson", "pyarrow", "pymysql", "confluent-kafka", "numpy"} <= names
    assert "sqlalchemy" in names  # pyiceberg[sql-sqlite]: an extra the project asks for
    assert not names & {"pyspark", "py4j", "pytest", "mypy", "ruff"}


def test_pack_environment_builds_once_per_key_and_prunes_old_archives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds: list[Path] = []

    def fake_build(output: Path, *_: object) -> None:
        builds.append(output)
        output.write_bytes(b"archive")

    monkeypatch.setattr(ship, "_build", fake_build)
    # A fixed key: the real one follows the source, which may change while the test runs.
    monkeypatch.setattr(ship, "environment_key", lambda *_a, **_k: "e" * 64)
    cache = tmp_path / "cache"
    cache.mkdir()
    for i in range(4):  # archives of older environments
        old = cache / f"changefeed-pyenv-old{i}.tar.gz"
        old.write_bytes(b"old")
        os.utime(old, (1000 + i, 1000 + i))
    first = pack_environment(cache)
    assert pack_environment(cache) == first and len(builds) == 1
    assert first.read_bytes() == b"archive" and not list(cache.glob("*.part"))
    left = sorted(p.name for p in cache.glob("changefeed-pyenv-*.tar.gz"))
    assert left == sorted([first.name, "changefeed-pyenv-old3.tar.gz", "changefeed-pyenv-old2.tar.gz"])
    monkeypatch.setattr(ship, "environment_key", lambda *_a, **_k: "f" * 64)  # a changed environment
    assert pack_environment(cache) != first and len(builds) == 2


def test_submit_takes_master_and_shipping_from_the_submission() -> None:
    from changefeed.cli.submit import submitted_argv  # noqa: PLC0415

    conf = {"spark.master": "yarn", "spark.pyspark.python": "./environment/bin/python"}
    assert submitted_argv(["--log-level", "info", "run", "c.toml"], conf) == [
        *("--log-level", "info", "run", "--master", "yarn", "--no-ship", "c.toml"),
    ]
    given = ["apply", "--from", "kafka://h/t", "--master=spark://h:7077", "--py-env", "e.tar.gz"]
    assert submitted_argv(given, conf) == given
    assert submitted_argv(["run", "c.toml"], {"spark.master": "spark://h:7077"}) == [
        *("run", "--master", "spark://h:7077", "c.toml"),
    ]
    assert submitted_argv(["status", "--changefeed", "x"], conf) == ["status", "--changefeed", "x"]


def test_remote_spark_connect_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from changefeed.cli import main  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    argv = ["apply", "--from", "kafka://127.0.0.1:9/t?protocol=open-protocol", "--to", f"parquet://{tmp_path}/out"]
    assert main([*argv, "--remote", "sc://127.0.0.1:15002"]) == 1
    err = capsys.readouterr().err
    assert "Spark Connect cannot run these jobs" in err and "foreachBatch" in err
    # run too, before its preflight connects to the source or the broker (nothing listens on port 9)
    config = tmp_path / "c.toml"
    config.write_text(
        'changefeed-id = "cf"\nsink-uri = "kafka://127.0.0.1:9/t?protocol=open-protocol"\n'
        '[source]\ntype = "mysql"\nurl = "mysql://root@127.0.0.1:9"\n'
    )
    assert main(["run", str(config), "--remote", "sc://127.0.0.1:15002"]) == 1
    err = capsys.readouterr().err
    assert "Spark Connect cannot run these jobs" in err and "127.0.0.1:9" not in err


def test_spark_submit_runs_the_job_on_the_submitted_master(tmp_path: Path) -> None:
    """``spark-submit --master local[1] changefeed/cli/submit.py run ...``: the job takes the submission's
    master (not the CLI's local[*] default) and writes the storage sink as a plain ``run`` does."""
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    import pyspark  # noqa: PLC0415

    import changefeed.cli.submit  # noqa: PLC0415
    from changefeed.codec import CodecOptions  # noqa: PLC0415
    from changefeed.consume.storage import StorageReader  # noqa: PLC0415
    from changefeed.model import RowChange  # noqa: PLC0415

    binlog = Path(__file__).resolve().parents[1] / "fixtures/binlog/full"
    out = tmp_path / "out"
    config = tmp_path / "c.toml"
    config.write_text(
        f'changefeed-id = "submitted"\nsink-uri = "file://{out}?protocol=canal-json&enable-tidb-extension=true"\n'
        f'[source]\ntype = "binlog-files"\npath = "{binlog}"\n'
    )
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    argv = [str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false", changefeed.cli.submit.__file__]
    argv += ["--log-format", "json", "--log-level", "info", "run", str(config), "--available-now"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    # spark-submit's Python runner passes the driver's stderr on through its own stdout: read both.
    lines = (done.stdout + done.stderr).splitlines()
    started = [json.loads(line) for line in lines if line.startswith("{") and '"job started"' in line]
    # the submission's master, with local mode's task retries (spark.session.local_with_retries)
    assert [s["master"] for s in started] == ["local[1,4]"], done.stdout[-3000:]
    codec = CodecOptions(protocol="canal-json", enable_tidb_extension=True)
    rows = [e for e in StorageReader(out, codec).poll() if isinstance(e, RowChange)]
    assert len(rows) == 23
