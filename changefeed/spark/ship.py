"""Shipping the project and its dependencies to a cluster's executors: a packed virtualenv in ``spark.archives``.

Why: executors on a cluster start their Python workers with whatever interpreter the driver names;
unless every node happens to have changefeed and its dependencies installed, the first task fails
with ``No module named 'changefeed'``. Spark's documented answer for Python packages
(python/docs/source/user_guide/python_packaging.rst) is a virtualenv packed with ``venv-pack``,
passed as ``spark.archives=ENV.tar.gz#environment`` with ``PYSPARK_PYTHON=./environment/bin/python``:
each executor unpacks it into its working directory and starts its workers from it.

What goes in: the interpreter links and ``pyvenv.cfg`` of this virtualenv (venv-pack's part), the
installed files of the project's runtime requirements (their closure, from the installed metadata
and the checkout's ``pyproject.toml``), and the ``changefeed`` package's own source tree. Left out:
dev tools, and PySpark with py4j: an executor puts its own Spark's ``pyspark.zip`` first on the
workers' path, so the copy would never be imported (and must match the cluster's Spark anyway).
An editable install (``pip install -e``, setuptools' finder) is a ``.pth`` hook pointing at the
checkout, which venv-pack 0.2 does not notice and the nodes cannot see: the package files are
added instead. The archive is built once per content hash of all that (the requirements' RECORD
files carry every installed file's sha256) and kept in a cache directory.

Limits (venv-pack's): ``bin/python`` stays a link to this machine's base interpreter, so every node
needs the same Python at the same path (or pack with venv-pack's ``--python-prefix`` and pass the
result with ``--py-env``); the nodes must share the OS and CPU architecture (compiled wheels).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata as md
import logging
import os
import re
import sys
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError

__all__ = [
    "ARCHIVE_ALIAS",
    "EXECUTOR_PYTHON",
    "Shipping",
    "environment_key",
    "is_local_master",
    "pack_environment",
    "plan_shipping",
    "runtime_distributions",
]

log = logging.getLogger(__name__)

#: The directory each executor unpacks the archive into (the ``#fragment`` of ``spark.archives``).
ARCHIVE_ALIAS = "environment"
#: The interpreter executors start their Python workers with, relative to their working directory.
EXECUTOR_PYTHON = f"./{ARCHIVE_ALIAS}/bin/python"
#: Provided by the cluster's Spark on every executor (its python/lib zips), never shipped.
PROVIDED_BY_SPARK = frozenset({"pyspark", "py4j"})
#: Bumped when what goes into an archive changes, so old cache entries are not reused.
_LAYOUT_VERSION = "1"
#: Archives of older environments kept in the cache besides the current one.
_KEEP_OLD = 2
_LOCAL = re.compile(r"^local(\[[^\]]*\])?$|^local-cluster\[[^\]]*\]$")


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[N,F]``, ``local[*]``, ``local-cluster[...]``: executors on this machine.

    Their Python workers run from this virtualenv already, so nothing needs shipping.
    """
    return bool(_LOCAL.match(master.strip()))


@dataclass(frozen=True)
class Shipping:
    """What a session needs so executors run our code: Spark settings and the workers' interpreter."""

    conf: dict[str, str] = field(default_factory=dict)
    #: ``PYSPARK_PYTHON`` for the driver to hand to executors; None keeps the default.
    python: str | None = None
    #: Why this choice, for the log.
    reason: str = ""


def plan_shipping(
    master: str,
    *,
    py_env: str | None,
    no_ship: bool,
    user_conf: Mapping[str, str],
    build: Callable[[], Path],
) -> Shipping:
    """Choose how executors get the project: nothing (local master, ``--no-ship``, a user-set
    ``spark.pyspark.python``), a pre-built archive (``--py-env``), or the cached packed virtualenv.

    ``build`` is only called when an archive must be built or found in the cache. A user's own
    ``spark.archives`` entries are kept next to ours.
    """
    if no_ship and py_env:
        raise ConfigError("--py-env and --no-ship contradict each other: pass one of them")
    if is_local_master(master):
        if py_env:
            log.warning("--py-env %s ignored: master %s runs executors from this environment", py_env, master)
        return Shipping(reason=f"local master {master}: executors use this environment")
    if no_ship:
        return Shipping(reason="--no-ship: the cluster's nodes have changefeed installed")
    if user_conf.get("spark.pyspark.python"):
        if py_env:
            raise ConfigError("--py-env needs the executors' interpreter: drop --spark-conf spark.pyspark.python")
        return Shipping(reason="spark.pyspark.python set by --spark-conf: the executors' interpreter is the user's")
    if py_env:
        archive = _archive_uri(py_env)
        reason = f"pre-built environment {archive}"
    else:
        archive = str(build())
        reason = f"packed virtualenv {archive}"
    archives = [a for a in (user_conf.get("spark.archives") or "").split(",") if a.strip()]
    archives.append(f"{archive}#{ARCHIVE_ALIAS}")
    conf = {"spark.archives": ",".join(archives), "spark.pyspark.python": EXECUTOR_PYTHON}
    return Shipping(conf=conf, python=EXECUTOR_PYTHON, reason=reason)


def _archive_uri(py_env: str) -> str:
    """A local ``--py-env`` must exist (made absolute); a URI (hdfs://, s3a://, https://) is the cluster's to fetch."""
    if "://" in py_env:
        return py_env
    path = Path(py_env).expanduser()
    if not path.is_file():
        raise ConfigError(f"--py-env {py_env}: no such archive (build one with venv-pack, docs/deploy.md)")
    if not path.name.endswith((".tar.gz", ".tgz", ".tar", ".zip")):
        raise ConfigError(f"--py-env {py_env}: Spark unpacks .tar.gz, .tgz, .tar or .zip archives only")
    return str(path.resolve())


# --- what goes into the archive ------------------------------------------------------------------------


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _project_requirements(package_dir: Path) -> list[str]:
    """The checkout's ``[project] dependencies`` when the package runs from one (an editable install).

    The installed metadata of an editable install is as old as its last ``pip install -e``; the
    checkout's list is what the code being shipped needs.
    """
    pyproject = package_dir.parent / "pyproject.toml"
    if not pyproject.is_file():
        return []
    with pyproject.open("rb") as fh:
        project = tomllib.load(fh).get("project", {})
    return list(project.get("dependencies", [])) if project.get("name") == "changefeed" else []


def runtime_distributions(
    package_dir: Path, root: str = "changefeed", extra: Iterable[str] = ()
) -> list[md.Distribution]:
    """The installed distributions ``root`` needs at run time (transitively, with the extras asked for).

    Spark's own (pyspark, py4j) are left out.

    A requirement whose marker does not hold here, or that is not installed, is skipped: the
    driver runs with the same environment, so it would fail there first.
    """
    from packaging.requirements import Requirement  # noqa: PLC0415 - pip's and setuptools' dependency

    found: dict[str, md.Distribution] = {}
    seen: set[tuple[str, str]] = set()  # (distribution, extra): ``pyiceberg[pyarrow]`` adds to ``pyiceberg``
    todo = [(spec, "") for spec in (root, *_project_requirements(package_dir), *extra)]
    while todo:
        spec, extra_of_parent = todo.pop()
        req = Requirement(spec)
        if req.marker and not req.marker.evaluate({"extra": extra_of_parent}):
            continue
        key = _key(req.name)
        if key in PROVIDED_BY_SPARK:
            continue
        wanted = [e for e in ("", *sorted(req.extras)) if (key, e) not in seen]
        if not wanted:
            continue
        dist = found.get(key)
        if dist is None:
            try:
                dist = md.distribution(req.name)
            except md.PackageNotFoundError:
                log.warning("requirement %s is not installed: not shipped", spec)
                continue
            found[key] = dist
        for e in wanted:
            seen.add((key, e))
            todo.extend((r, e) for r in dist.requires or ())
    return [found[k] for k in sorted(found)]


def _package_files(package_dir: Path) -> list[Path]:
    """The package's source tree without bytecode caches."""
    return sorted(
        p
        for p in package_dir.rglob("*")
        if p.is_file() and "__pycache__" not in p.relative_to(package_dir).parts and p.suffix != ".pyc"
    )


def environment_key(dists: Iterable[md.Distribution], package_dir: Path, python: str | None = None) -> str:
    """sha256 over the interpreter, each shipped distribution's name, version and RECORD (which lists every
    installed file with its own sha256), and every file of the project's package: any change is a new archive.
    """
    h = hashlib.sha256()
    h.update(f"layout {_LAYOUT_VERSION}\npython {python or _base_python()} {sys.version}\n".encode())
    for dist in sorted(dists, key=lambda d: _key(d.metadata["Name"])):
        name = _key(dist.metadata["Name"])
        if name == "changefeed":
            continue  # its files are hashed below; its RECORD differs between editable and regular installs
        h.update(f"dist {name} {dist.version}\n".encode())
        record = dist.read_text("RECORD")
        if record is None:  # not installed by an installer that writes RECORD: the file list and sizes
            files = sorted(dist.files or (), key=str)
            record = "\n".join(f"{f} {_size(dist, f)}" for f in files)
        h.update(hashlib.sha256(record.encode()).digest())
    for path in _package_files(package_dir):
        h.update(f"file {path.relative_to(package_dir).as_posix()}\n".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _size(dist: md.Distribution, f: md.PackagePath) -> int:
    try:
        return os.path.getsize(str(dist.locate_file(f)))
    except OSError:
        return -1


def _base_python() -> str:
    """What ``bin/python`` of this virtualenv resolves to: every node needs it at that path."""
    return os.path.realpath(os.path.join(sys.prefix, "bin", "python"))


def _site_packages() -> Path:
    return Path(sys.prefix, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")


def _kept_sources(dists: Iterable[md.Distribution]) -> set[str]:
    """Absolute paths of the files the shipped distributions installed (their RECORD), the project's excluded."""
    kept: set[str] = set()
    for dist in dists:
        if _key(dist.metadata["Name"]) == "changefeed":
            continue
        for f in dist.files or ():
            kept.add(os.path.normpath(str(dist.locate_file(f))))
    return kept


# --- building and caching -------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$CHANGEFEED_CACHE_DIR``, else ``$XDG_CACHE_HOME/changefeed``, else ``~/.cache/changefeed``; then ``pyenv``."""
    base = os.environ.get("CHANGEFEED_CACHE_DIR")
    if base:
        return Path(base) / "pyenv"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "changefeed" / "pyenv"


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One builder at a time per cache directory (two jobs started together build once)."""
    with open(directory / ".lock", "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def pack_environment(cache_dir: Path | None = None, *, compress_level: int = 1) -> Path:
    """The packed virtualenv of this interpreter for ``spark.archives``: from the cache, or built into it.

    ``compress_level`` 1: a few % larger than venv-pack's default 4 and about twice as fast to build.
    """
    if sys.prefix == sys.base_prefix:
        raise ConfigError(
            "shipping the project to a cluster needs changefeed installed in a virtualenv (venv-pack packs one); "
            "pass a pre-built archive with --py-env, or --no-ship when the nodes have it installed"
        )
    import changefeed  # noqa: PLC0415

    package_dir = Path(changefeed.__file__).resolve().parent
    dists = runtime_distributions(package_dir)
    key = environment_key(dists, package_dir)
    directory = (cache_dir or default_cache_dir()).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / f"changefeed-pyenv-{key[:20]}.tar.gz"
    with _locked(directory):
        if archive.is_file():
            log.info("shipping cached environment %s", archive)
            os.utime(archive)  # newest use first when pruning
            return archive
        log.info("packing this virtualenv for the executors into %s (once per environment)", archive)
        part = archive.with_name(archive.name + f".{os.getpid()}.part")
        try:
            _build(part, dists, package_dir, compress_level)
            os.replace(part, archive)
        finally:
            part.unlink(missing_ok=True)
        _prune(directory, keep=archive)
    return archive


def _build(output: Path, dists: list[md.Distribution], package_dir: Path, compress_level: int) -> None:
    import venv_pack  # noqa: PLC0415 - only a cluster run pays for it
    from venv_pack.core import File  # noqa: PLC0415 - venv-pack's (source, target) pair

    env = venv_pack.Env(sys.prefix)
    site = _site_packages()
    site_rel = site.relative_to(sys.prefix).as_posix() + "/"
    kept = _kept_sources(dists)
    files = []
    for f in env.files:
        target = f.target.replace(os.sep, "/")
        if target.startswith(site_rel):
            keep = os.path.normpath(f.source) in kept
        else:  # the interpreter links and lib64 -> lib; not scripts, headers or whatever else lives there
            keep = bool(re.fullmatch(r"bin/python[\d.]*", target)) or (os.path.islink(f.source) and "/" not in target)
        if keep:
            files.append(f)
    files.extend(
        File(str(p), site_rel + "changefeed/" + p.relative_to(package_dir).as_posix())
        for p in _package_files(package_dir)
    )
    # Env.files is the list venv-pack packs; filtering by hand keeps whole distributions out by RECORD.
    env.files[:] = files
    env.pack(output=str(output), format="tar.gz", compress_level=compress_level, force=True)


def _prune(directory: Path, keep: Path) -> None:
    """Drop all but the newest few archives: every edit of the source makes a new one."""
    old = sorted(
        (p for p in directory.glob("changefeed-pyenv-*.tar.gz") if p != keep),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for path in old[_KEEP_OLD:]:
        with contextlib.suppress(OSError):
            path.unlink()
