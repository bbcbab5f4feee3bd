"""Private temporary directories named after their process, and the sweep of those a killed one left.

Why: what a process keeps in a temporary directory while it works (a job driver's hand-over of a
micro-batch's task output, changefeed/spark/collect.py) stays behind when it is killed. Naming the
directory after the process id lets the next process of the same user remove it once that
process is gone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading

__all__ = ["process_temp_dir", "sweep_dead"]

_swept: set[str] = set()  # prefixes swept by this process
_lock = threading.Lock()


def process_temp_dir(prefix: str) -> str:
    """A new directory ``<tempdir>/<prefix><pid>-XXXX`` only this user can enter (mkdtemp: 0700); the
    first call for a prefix in a process sweeps that prefix's directories of processes that are gone."""
    with _lock:
        if prefix not in _swept:
            _swept.add(prefix)
            sweep_dead(prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")


def sweep_dead(prefix: str) -> None:
    """Remove ``<prefix><pid>-*`` directories of this user whose process is gone: only real directories
    (no links), and never one whose pid runs (a reused pid keeps it: the safe way to be wrong)."""
    base = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(base) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix) :].split("-", 1)[0]
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
            if not pid.isdigit() or st.st_uid != os.getuid() or not os.path.isdir(path) or os.path.islink(path):
                continue
            os.kill(int(pid), 0)  # raises ProcessLookupError when the process is gone
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue
