"""What a shared (fractional) pod holds on one card; the Python twin of the kernels' rule.

A share of compute implies the same share of the card's memory and vice versa, so a pod
that names only gpu-milli cannot take all of a card's memory, and one that names only
gpu-memory-mib takes the matching compute share.
"""

from __future__ import annotations

from gpusched.model.node import FULL_CARD_MILLI
from gpusched.model.pod import PodRequest


def share_on_card(req: PodRequest, card_total_mib: int) -> tuple[int, int]:
    """(milli, MiB) a shared pod holds on a card of `card_total_mib`; (-1, -1) if the pod
    asks for memory on a card whose memory is unknown (it can never fit there)."""
    if req.gpu_cards:
        return FULL_CARD_MILLI, card_total_mib
    if card_total_mib <= 0:
        return (-1, -1) if req.gpu_mem_mib else (req.gpu_milli, 0)
    milli = max(req.gpu_milli, -(-req.gpu_mem_mib * FULL_CARD_MILLI // card_total_mib))
    mem = max(req.gpu_mem_mib, req.gpu_milli * card_total_mib // FULL_CARD_MILLI)
    return milli, mem
