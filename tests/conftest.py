"""Suite-wide guards."""

from __future__ import annotations

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    # A run that collects nothing must fail loudly: pytest's own exit code 5 is easy to
    # ignore, and a mistyped path would otherwise look green.
    if not session.items and not session.config.option.collectonly:
        raise pytest.UsageError("no tests were collected: check the test paths and -k/-m filters")
