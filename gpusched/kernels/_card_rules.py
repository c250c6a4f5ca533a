"""Per-card eligibility rules shared by ``gpu_summary`` and ``choose_cards``.

Both kernels must agree card for card (a node the summary calls fit must yield cards), so the
rules live here once per flavour: scalar helpers for the numba kernels, array helpers for the
NumPy twins. The twins never call the scalar helpers: a twin that shares code with its kernel
cannot catch the kernel's mistakes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import Int, njit_kernel

INTACT_MILLI = 1000
# Larger than any leftover (free_milli <= 1000) so "no fitting card yet" never wins a min.
NO_LEFTOVER = 1 << 30
# Cards of one node are tracked in an int64 bitmask on the hot path (no per-row allocation)
# and a card index fits in the low CARD_BITS of a packed (leftover, index) key.
MAX_CARDS = 63
CARD_BITS = 6
CARD_MASK = (1 << CARD_BITS) - 1


@njit_kernel
def card_usable(
    model: Int, healthy: bool | np.bool_, allowed_models: npt.NDArray[np.bool_]
) -> bool | np.bool_:
    """A card a pod of this request may use at all: present, healthy, model allowed.

    Model ids outside ``allowed_models`` count as not allowed rather than reading past the
    array: a snapshot that learnt a new model before the request was built must not crash.
    """
    return healthy and 0 <= model < allowed_models.shape[0] and allowed_models[model]


@njit_kernel
def shared_need_milli(req_milli: Int, req_mem: Int, total_mem: Int) -> Int:
    """need_milli of a shared pod on a card with ``total_mem`` MiB (int64 arguments).

    A share of memory implies the same share of compute: the larger of the asked milli and
    ``ceil(req_mem * 1000 / total_mem)``. A card whose memory is unknown (total <= 0: a node
    without the GFD memory label) takes a pod that asks only for a share of compute, never
    one that asks for memory (its need is then above any card's share).
    """
    if total_mem <= 0:
        return INTACT_MILLI + 1 if req_mem > 0 else req_milli
    return max(req_milli, (req_mem * INTACT_MILLI + total_mem - 1) // total_mem)


@njit_kernel
def shared_need_mem(req_milli: Int, req_mem: Int, total_mem: Int) -> Int:
    """need_mem of a shared pod: the larger of the asked MiB and req_milli's share of the
    card, ``floor(req_milli * total_mem / 1000)`` (int64 arguments)."""
    return max(req_mem, req_milli * total_mem // INTACT_MILLI)


def usable_cards_np(
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    allowed_models: npt.NDArray[np.bool_],
) -> npt.NDArray[np.bool_]:
    """Array twin of :func:`card_usable`."""
    in_range = (card_model >= 0) & (card_model < allowed_models.shape[0])
    allowed = np.zeros(card_model.shape, dtype=np.bool_)
    allowed[in_range] = allowed_models[card_model[in_range]]
    return allowed & card_healthy


def shared_need_np(
    req_milli: int, req_mem: int, card_total_mem: npt.NDArray[np.int32]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Array twin of :func:`shared_need`; also returns where the card can serve the request
    at all (its memory is known, or the pod asks for no memory)."""
    total = card_total_mem.astype(np.int64)
    has_mem = (total > 0) | (req_mem == 0)
    safe_total = np.where(has_mem, total, 1)
    need_milli = np.full(total.shape, req_milli, dtype=np.int64)
    if req_mem > 0:
        need_milli = np.maximum(need_milli, -((-req_mem * INTACT_MILLI) // safe_total))
    need_mem = np.maximum(req_mem, req_milli * total // INTACT_MILLI)
    return need_milli, need_mem, has_mem
