"""Pick the numba kernel or its NumPy twin at import time.

With NUMBA_DISABLE_JIT=1 a `*_nb` kernel runs as a plain Python loop, hundreds of times
slower than its twin; the plugins then call the twin, which the property tests prove gives
the same results, so the suite stays fast and still runs the whole scheduler.
"""

from __future__ import annotations

from typing import TypeVar

import numba

F = TypeVar("F")

# numba.config is filled in at import from the environment; it ships no type stubs.
JIT_ENABLED = not getattr(numba.config, "DISABLE_JIT", False)


def pick(jitted: F, twin: F) -> F:
    return jitted if JIT_ENABLED else twin
