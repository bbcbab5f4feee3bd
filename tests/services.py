"""The skip-or-fail policy for tests that need a real service (test scaffolding, not shipped).

A developer machine without a service skips; CI (``CI=true``) fails, because CI must never pass
by skipping. The one place that decides.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """True when running under CI (``CI=true``, as GitHub Actions, GitLab and others set it)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def service_unavailable(reason: str) -> NoReturn:
    """Skip the current test locally, fail it under CI."""
    if in_ci():
        pytest.fail(f"service unavailable under CI (CI=true never skips): {reason}", pytrace=False)
    pytest.skip(f"service unavailable: {reason}")
