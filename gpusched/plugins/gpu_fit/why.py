"""Why GPUFit's Reserve gave a pod those cards, in words for the decision record and the
`Scheduled` Event ("NVLink island 0 (cards 0-3) ...", "best-fit card 3: 250m free left").

Reserve keeps what the choice was made from (the chosen node's free shares before the pod
was assumed) and which rule applied; these functions word it only when the record is
written, once per bound pod, so the scheduling cycle pays a copy of one row, not a string.
The words restate choose_cards' rules (gpusched/kernels/choose_cards.py) for the cards it
returned, from the same inputs: the island is the chosen cards' own island, and the
"tightest island" claim is checked against the other islands' free intact cards.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from gpusched.kernels._card_rules import INTACT_MILLI, usable_cards_np


def card_list(cards: list[int] | tuple[int, ...]) -> str:
    """0,1,2,3 -> "0-3"; 0,2,5 -> "0,2,5"; runs of three or more as ranges."""
    out: list[str] = []
    i = 0
    cs = sorted(cards)
    while i < len(cs):
        j = i
        while j + 1 < len(cs) and cs[j + 1] == cs[j] + 1:
            j += 1
        out.append(f"{cs[i]}-{cs[j]}" if j - i >= 2 else ",".join(map(str, cs[i : j + 1])))
        i = j + 1
    return ",".join(out)


def whole_cards_reason(
    cards: tuple[int, ...],
    free_milli: NDArray[np.int32],
    free_mem: NDArray[np.int32],
    model: NDArray[np.int16],
    healthy: NDArray[np.bool_],
    island: NDArray[np.int8],
    temp: NDArray[np.float32],
    req_mem: int,
    allowed: NDArray[np.bool_],
    nvlink: int,
) -> str:
    """Why choose_cards took `cards` (k whole cards) on a node whose row, before the pod,
    was `free_milli` ... `temp` (one node's columns)."""
    k = len(cards)
    present = model >= 0
    elig = (
        usable_cards_np(model, healthy, allowed)
        & (free_milli == INTACT_MILLI)
        & (free_mem >= req_mem)
    )
    chosen_islands = {int(island[c]) for c in cards}
    # choose_cards takes the coolest of the chosen pool when temperatures are known.
    known = [float(temp[c]) for c in cards if not np.isnan(temp[c])]
    cool = f"; the coolest eligible cards there (hottest {max(known):.0f} °C)" if known else ""
    if chosen_islands == {-1}:
        return (
            f"cards {card_list(cards)}: NVLink layout unknown (no island published), "
            f"{k} intact card{'s' if k != 1 else ''} by lowest index{cool}"
        )
    if len(chosen_islands) > 1:
        return (
            f"cards {card_list(cards)}: no NVLink island has {k} free intact cards, so they "
            f"span islands {','.join(str(i) for i in sorted(chosen_islands))}{cool}"
        )
    (isl,) = chosen_islands
    members = [int(c) for c in np.flatnonzero(present & (island == isl))]
    free_here = int(np.count_nonzero(elig & (island == isl)))
    others = []
    tie = False
    for other in sorted({int(i) for i in island[present]} - {isl, -1}):
        n_free = int(np.count_nonzero(elig & (island == other)))
        size = int(np.count_nonzero(present & (island == other)))
        tie |= n_free == free_here
        if n_free >= free_here or (n_free >= k and n_free == size):
            whole = " whole" if n_free == size else ""
            others.append(f"island {other} ({n_free} of {size} free){whole}")
    why = f"the island with the fewest free intact cards ({free_here}) that holds {k}"
    if tie:
        why += " (first by card index among equals)"
    kept = f", keeps {' and '.join(others)}" if others else ""
    return f"NVLink island {isl} (cards {card_list(members)}): {why}{kept}{cool}"


def shared_card_reason(card: int, free_before: int, held: int, hinted_by: str | None) -> str:
    """Why a shared pod got `card`: best fit (GPUFit's own rule) or a Score plugin's pick
    (CARD_HINT, `hinted_by` in that plugin's words)."""
    left = f"{free_before - held}m free left of {free_before}m"
    if hinted_by is not None:
        return f"card {card} ({hinted_by}): {left}"
    return f"best-fit card {card} (the least share left over among the cards that fit): {left}"
