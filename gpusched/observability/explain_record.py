"""The parts of a decision record that explain the choice, and the `Scheduled` Event's text.

* `tie`: how many nodes shared the top total and, when more than one did, the tie-break
  rule and its input ("chosen among 3 tied nodes by seeded node order");
* `cards_reason`: why those cards, in the words of the plugin that chose them (GPUFit's
  Reserve, gpusched/plugins/gpu_fit/why.py);
* `score_units`: the unit of each Score plugin's raw score (its `score_unit`, declared on
  the plugin class; the daemon's `started` line gives each unit's meaning once);
* `chosen_scores`: each plugin's raw score on the chosen node, best contribution first, or
  "no data" where the plugin said its number there is a neutral stand-in (NO_DATA).

Everything here runs once per attempt that chose a node and reads what the cycle already
computed: no kernel, no pass over the nodes (the chosen row's index is found once and
shared with `top`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpusched.core.schedule_one import Decision
from gpusched.framework.interfaces import CARD_REASON, NO_DATA

NO_DATA_TEXT = "no data"
# kube-apiserver refuses an Event whose message is longer (core/v1 validation).
EVENT_MESSAGE_LIMIT = 1024
EVENT_TOP_PLUGINS = 3


def tie_entry(decision: Decision) -> dict[str, Any] | None:
    """How the node was picked among its equals; None when no node was selected by score."""
    if not decision.node or decision.scores is None:
        return None
    tied = decision.tied
    if tied == 0:
        return {"tied": 0, "rule": "nominated", "text": "the node preemption nominated"}
    if tied == 1:
        return {"tied": 1, "text": "the only node with the top total score"}
    fw = decision.framework
    out: dict[str, Any] = {"tied": tied}
    out.update(fw.describe_tie_break(decision.node) if fw is not None else {"rule": "unknown"})
    seed = f" (seed {out['seed']})" if "seed" in out else ""
    out["text"] = f"chosen among {tied} tied nodes by {out['rule']}{seed}"
    return out


def cards_reason(decision: Decision) -> str | None:
    """GPUFit's words for the cards given (CARD_REASON); None for a pod without cards."""
    if decision.alloc is None or not decision.alloc.cards:
        return None
    words = decision.state.get(CARD_REASON)
    if words is None:
        return None
    try:
        return words()
    except Exception as exc:  # a wording bug must not cost the record
        return f"(no reason: wording it raised {exc!r})"


def score_units(decision: Decision) -> dict[str, str]:
    """The unit of the raw score of each plugin that scored this pod."""
    fw = decision.framework
    if fw is None or decision.scores is None:
        return {}
    return fw.score_units_of(decision.scores.by_plugin.keys())


def chosen_scores(
    decision: Decision, entry: Mapping[str, Any] | None, chosen: int
) -> dict[str, float | str]:
    """Each plugin's raw score on the chosen node, in order of what it added to the total
    (weight x normalised score), "no data" last. `entry`: the chosen node's entry of `top`
    (its numbers already taken out of the arrays); `chosen`: its index in the scored rows."""
    if entry is None or decision.scores is None or chosen < 0:
        return {}
    row = decision.alloc.row if decision.alloc is not None else -1
    tests = decision.state.get(NO_DATA) or {}
    have: list[tuple[float, str, float]] = []
    missing: list[str] = []
    for name, s in entry["scores"].items():
        test = tests.get(name)
        if test is not None and test(row, chosen):
            missing.append(name)
        else:
            have.append((-s["weight"] * s["normalized"], name, s["raw"]))
    have.sort()
    out: dict[str, float | str] = {name: raw for _, name, raw in have}
    for name in missing:
        out[name] = NO_DATA_TEXT
    return out


def scheduled_message(pod_key: str, node: str, record: dict[str, Any], settled: str = "") -> str:
    """The `Scheduled` Event: kube-scheduler's sentence first ("Successfully assigned ns/p
    to node", kept verbatim for tools that parse it), then in parentheses the cards, the
    total with the plugins that added most to it ("no data" ones named too), the tie and
    any remark about the Binding; cut to the API's 1024-byte limit."""
    head = f"Successfully assigned {pod_key} to {node}"
    parts: list[str] = []
    if record.get("cards"):
        parts.append("cards " + ",".join(map(str, record["cards"])))
    scored: dict[str, float | str] = record.get("chosen_scores") or {}
    total = next((t["total"] for t in record.get("top") or () if t.get("node") == node), None)
    if scored and total is not None:
        named: list[str] = []
        shown = 0
        for n, v in scored.items():
            if v == NO_DATA_TEXT:
                named.append(f"{n} {NO_DATA_TEXT}")
            elif shown < EVENT_TOP_PLUGINS:
                named.append(f"{n} {v:.1f}")
                shown += 1
        parts.append(f"score {total:.1f}: {', '.join(named)}")
    tie = record.get("tie")
    if tie and tie.get("tied", 1) != 1:
        parts.append(tie["text"])
    if settled:
        parts.append(settled)
    message = head + (f" ({'; '.join(parts)})" if parts else "")
    return cut(message, EVENT_MESSAGE_LIMIT)


def cut(text: str, limit: int) -> str:
    """`text` within `limit` UTF-8 bytes, ending in "…" when shortened."""
    if len(text) * 4 <= limit:  # UTF-8 takes at most 4 bytes a character
        return text
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: limit - len("…".encode())].decode(errors="ignore") + "…"
