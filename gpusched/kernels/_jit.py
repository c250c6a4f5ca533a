"""The numba decorator every kernel uses, typed so mypy --strict keeps each kernel's signature.

numba ships no type stubs: a bare ``@njit`` would turn every kernel into ``Any`` and hide
signature mistakes from the plugins that call them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np

F = TypeVar("F", bound=Callable[..., Any])
# Integer scalars inside kernels are numpy integers (np.int64(x) casts keep numba and
# NUMBA_DISABLE_JIT in the same integer width); helpers accept either.
Int = int | np.integer[Any]


def njit_kernel(fn: F) -> F:
    """Compile ``fn`` in nopython mode.

    ``cache=True`` because a scheduler restart would otherwise pay about a second of
    compilation per kernel before its first cycle; ``nogil=True`` so the simulator can run
    cycles on worker threads. Under ``NUMBA_DISABLE_JIT=1`` numba hands back ``fn`` itself.
    """
    return cast(F, numba.njit(cache=True, nogil=True)(fn))


def njit_inline(fn: F) -> F:
    """Like :func:`njit_kernel` for small helpers called per row: numba inlines them at IR
    level, so the caller's loop pays no call (argument structs, error-status check)."""
    return cast(F, numba.njit(cache=True, nogil=True, inline="always")(fn))
