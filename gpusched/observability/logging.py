"""structlog JSON on stdout: `kubectl logs` is the scheduler's decision trace.

One `decision` record per scheduling attempt (see docs/daemon.md for a sample): the pod,
the attempt, the result, the time per extension point, filter rejections counted by
reason, the top candidate nodes with each Score plugin's raw and normalised score, the
chosen cards, and `notes`: what plugins say about the chosen node (Thermal: the temperature
it used, fresh or none, whether the node is latched); for an attempt that chose a node, why
(observability/explain_record.py): `tie`, `chosen_scores` ("no data" marked), `score_units`
and `cards_reason`. Library warnings that go through the
standard `logging` module (the watch, the writer) are rendered as the same JSON lines, so
the stream stays machine-readable.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import numpy as np
import orjson
import structlog

from gpusched.core.schedule_one import Decision
from gpusched.framework.interfaces import NODE_NOTES
from gpusched.observability.explain_record import (
    cards_reason,
    chosen_scores,
    score_units,
    tie_entry,
)

TOP_NODES = 5

# Library loggers whose records join the JSON stream.
_STDLIB_ROOT = "gpusched"


def _dumps(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY, default=str).decode()


_PROCESSORS: list[Any] = [
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.format_exc_info,
]


def make_logger(
    stream: TextIO | None = None, level: str = "info"
) -> structlog.typing.FilteringBoundLogger:
    """A JSON logger writing to `stream` (stdout by default), one object per line, and the
    `gpusched.*` standard-library loggers routed to the same stream.

    Built per daemon rather than configured globally so tests can run a daemon in-process
    with its own stream."""
    out = stream or sys.stdout
    lvl = logging.getLevelNamesMapping().get(level.upper())
    if lvl is None:
        raise ValueError(f"unknown log level {level!r} (debug, info, warning, error)")
    logger: structlog.typing.FilteringBoundLogger = structlog.wrap_logger(
        structlog.PrintLogger(out),
        processors=[*_PROCESSORS, structlog.processors.JSONRenderer(serializer=_dumps)],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(serializer=_dumps),
            ],
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
            ],
        )
    )
    std = logging.getLogger(_STDLIB_ROOT)
    for old in [h for h in std.handlers if getattr(h, "_gpusched", False)]:
        std.removeHandler(old)
    handler._gpusched = True  # type: ignore[attr-defined]  # marks handlers we own
    std.addHandler(handler)
    std.setLevel(lvl)
    std.propagate = False
    return logger


def _round(x: float) -> float:
    return round(float(x), 3)


def chosen_index(decision: Decision) -> int:
    """The chosen node's index among the scored rows; -1 when none was chosen by score."""
    scores = decision.scores
    if scores is None or decision.alloc is None:
        return -1
    hits = np.flatnonzero(scores.rows == decision.alloc.row)
    return int(hits[0]) if len(hits) else -1


def top_nodes(
    decision: Decision, names: list[str], k: int = TOP_NODES, chosen: int | None = None
) -> list[dict[str, Any]]:
    """The k best candidates with each plugin's raw and normalised score and weight. The
    chosen node is always listed (first among equal totals): with many ties the tie-break
    may pick a node that a plain top-k would leave out. `chosen`: chosen_index, if known."""
    scores = decision.scores
    if scores is None or len(scores.rows) == 0:
        return []
    total = scores.total
    k = min(k, len(total))
    best = np.argpartition(-total, k - 1)[:k] if k < len(total) else np.arange(len(total))
    if chosen is None:
        chosen = chosen_index(decision)
    if chosen >= 0 and chosen not in best:
        best[-1] = chosen
    order = sorted(best.tolist(), key=lambda i: (-total[i], i != chosen))
    best = np.array(order, np.intp)
    # The k entries of every array taken at once as Python numbers: indexing numpy arrays
    # one scalar at a time cost more than the rest of the record (bench/throughput.py).
    rows = scores.rows[best].tolist()
    totals = total[best].tolist()
    plugins = [
        (name, ps.raw[best].tolist(), ps.normalized[best].tolist(), ps.weight)
        for name, ps in scores.by_plugin.items()
    ]
    # The chosen node by its own name: the record is written after binding (or a gang's
    # wait at Permit), when its row may hold another node (`names` is read now).
    chosen_at = order.index(chosen) if chosen >= 0 and decision.node else -1

    def name_of(row: int) -> str:
        return names[row] if row < len(names) else str(row)

    out: list[dict[str, Any]] = []
    for j, row in enumerate(rows):
        out.append(
            {
                "node": decision.node if j == chosen_at else name_of(row),
                "total": _round(totals[j]),
                "scores": {
                    name: {"raw": _round(raw[j]), "normalized": _round(norm[j]), "weight": weight}
                    for name, raw, norm, weight in plugins
                },
            }
        )
    return out


def decision_record(
    decision: Decision,
    *,
    names: list[str],
    profile: str,
    attempt: int,
    result: str,
    message: str = "",
    extra_us: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The fields of one decision line (without the logger's own: event, level, timestamp)."""
    pod = decision.pod
    chosen = chosen_index(decision)
    us = {point: round(ns / 1e3, 1) for point, ns in decision.point_ns.items()}
    if extra_us:
        us.update({k: round(v, 1) for k, v in extra_us.items()})
    rec: dict[str, Any] = {
        "pod": pod.key,
        "uid": pod.uid,
        "profile": profile,
        "attempt": attempt,
        "result": result,
        "message": message or decision.message,
        "node": decision.node or None,
        "cards": list(decision.alloc.cards) if decision.alloc else [],
        "feasible": decision.feasible,
        "nodes": decision.diagnosis.total_nodes if decision.diagnosis else 0,
        "us": us,
        "rejections": dict(decision.diagnosis.reasons or {}) if decision.diagnosis else {},
        "top": top_nodes(decision, names, chosen=chosen),
    }
    if decision.node and decision.scores is not None:
        # Why this node and these cards (observability/explain_record.py).
        rec["tie"] = tie_entry(decision)
        entry = next((t for t in rec["top"] if t["node"] == decision.node), None)
        rec["chosen_scores"] = chosen_scores(decision, entry, chosen)
        rec["score_units"] = score_units(decision)
        reason = cards_reason(decision)
        if reason is not None:
            rec["cards_reason"] = reason
    if decision.alloc is not None and decision.alloc.cards and pod.request.gpu_cards == 0:
        rec["milli"] = list(decision.alloc.milli)
    if decision.status.plugin:
        rec["plugin"] = decision.status.plugin
    notes = node_notes(decision, names)
    if notes:
        rec["notes"] = notes
    return rec


def node_notes(decision: Decision, names: list[str]) -> dict[str, Any]:
    """What plugins registered (NODE_NOTES) about the chosen node, by plugin name; empty
    when no node was chosen or no plugin had anything to say."""
    notes = decision.state.get(NODE_NOTES) if decision.node else None
    if not notes:
        return {}
    if decision.alloc is not None:
        row = decision.alloc.row
    elif decision.node in names:
        row = names.index(decision.node)
    else:
        return {}
    return {name: dict(note(row)) for name, note in notes.items()}
