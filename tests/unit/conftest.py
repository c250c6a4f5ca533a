from __future__ import annotations

import pytest

from gpusched.framework.registry import Registry
from tests.fake_plugins import make_registry


@pytest.fixture
def registry() -> Registry:
    return make_registry()
