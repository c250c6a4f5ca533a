"""Why GPUFit's Reserve gave a pod those cards, in words for the decision record and the
`Scheduled` Event ("NVLink island 0 (cards 0-3) ...", "best-fit card 3: 250m free left").

Reserve keeps what the choice was made from (the chosen row's card columns as choose_cards
read them: free shares before the pod was assumed, models, health, islands, temperatures)
and which rule applied; these functions word it only when the record is written, once per
bound pod (after binding, or a gang's wait at Permit: by then a reading may have changed or
the row may hold another node), so the scheduling cycle pays copies of one row, not a string.
The words restate choose_cards' rules (gpusched/kernels/choose_cards.py) for the cards it
returned, from the same inputs: the island is the chosen cards' own island, and the
"tightest island" claim is checked against the other islands' free intact cards.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from gpusched.kernels._card_rules import INTACT_MILLI


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
) -> str:
    """Why choose_cards took `cards` (k whole cards) on a node whose row, before the pod,
    was `free_milli` ... `temp` (one node's columns). Plain Python over the row's few
    cards (lists, not array operations): this runs once per bound pod, inside the record."""
    k = len(cards)
    models, isl_of = model.tolist(), island.tolist()
    fm, mm, hl, ok = free_milli.tolist(), free_mem.tolist(), healthy.tolist(), allowed.tolist()
    temps = temp.tolist()
    # Per island: its cards, and those the pod could take (choose_cards' eligible cards).
    size_of: dict[int, int] = {}
    free_of: dict[int, int] = {}
    for c, m in enumerate(models):
        if m < 0:
            continue
        i = isl_of[c]
        size_of[i] = size_of.get(i, 0) + 1
        if fm[c] == INTACT_MILLI and mm[c] >= req_mem and hl[c] and m < len(ok) and ok[m]:
            free_of[i] = free_of.get(i, 0) + 1
    chosen_islands = {isl_of[c] for c in cards}
    # choose_cards takes the coolest of the chosen pool when temperatures are known.
    known = [temps[c] for c in cards if not math.isnan(temps[c])]
    cool = f"; the coolest eligible cards there (hottest {max(known):.0f} °C)" if known else ""
    if len(chosen_islands) > 1:
        return (
            f"cards {card_list(cards)}: no NVLink island has {k} free intact cards, so they "
            f"span islands {','.join(str(i) for i in sorted(chosen_islands))}{cool}"
        )
    (isl,) = chosen_islands
    if isl < 0:
        how = "the coolest" if known else "by lowest index"
        return (
            f"cards {card_list(cards)}: NVLink layout unknown (no island published), "
            f"{k} intact card{'s' if k != 1 else ''} {how}{cool}"
        )
    members = [c for c, m in enumerate(models) if m >= 0 and isl_of[c] == isl]
    free_here = free_of.get(isl, 0)
    others = []
    tie = False
    for other in sorted(size_of):
        if other == isl or other < 0:
            continue
        n_free, size = free_of.get(other, 0), size_of[other]
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
