"""Where the tests find the real openb trace (never copied into the project)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def openb_dir() -> Path:
    """GPUSCHED_OPENB_DIR, else the repository's sibling shared/traces/openb."""
    env = os.environ.get("GPUSCHED_OPENB_DIR")
    if env:
        return Path(env)
    # tests/ -> repository root -> its sibling shared/ (as laid out for CI too).
    return Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "openb"


def require_openb(pod_file: str) -> Path:
    """The trace directory, or a skip that says where it was looked for."""
    directory = openb_dir()
    if not (directory / pod_file).is_file():
        reason = f"openb trace not found at {directory} (set GPUSCHED_OPENB_DIR)"
        print(reason)
        pytest.skip(reason)
    return directory
