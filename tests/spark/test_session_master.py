"""Local masters retry a failed task, as a cluster does (`changefeed.spark.session.local_with_retries`)."""

from __future__ import annotations

import pytest

from changefeed.spark.session import local_with_retries


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("local", "local[1,4]"),
        ("local[2]", "local[2,4]"),
        ("local[*]", "local[*,4]"),
        (" local[8] ", "local[8,4]"),
        ("local[2,1]", "local[2,1]"),  # chosen by the user: as given
        ("spark://127.0.0.1:7077", "spark://127.0.0.1:7077"),
        ("local-cluster[2,1,1024]", "local-cluster[2,1,1024]"),
        ("yarn", "yarn"),
    ],
)
def test_local_masters_get_task_retries(given: str, used: str) -> None:
    assert local_with_retries(given) == used
