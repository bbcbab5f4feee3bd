"""`changefeed apply --help` states which settings give atomic per-transaction visibility downstream."""

from __future__ import annotations

from pathlib import Path

import pytest

from changefeed.cli import main
from changefeed.cli.apply import VISIBILITY

DOCS = Path(__file__).resolve().parents[2] / "docs" / "mysql-sink.md"


def test_apply_help_states_atomic_and_eventual_settings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["apply", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert VISIBILITY in text  # printed as laid out, not reflowed
    one, many = text.index("worker-count=1 (the default"), text.index("worker-count=N, N > 1")
    assert "atomic per transaction" in text[one:many]
    assert "PARTS of an upstream transaction" in text[many:] and "EVENTUAL equality" in text[many:]
    assert "separate transaction" in text[many:]


def test_docs_carry_the_same_table() -> None:
    doc = DOCS.read_text()
    assert "### What readers see" in doc and "**Atomic per transaction.**" in doc
    assert "**Eventual equality only**" in doc
