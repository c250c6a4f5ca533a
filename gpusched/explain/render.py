"""An Explanation (as JSON) in words, for a terminal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def human(report: Mapping[str, Any]) -> str:
    lines = [f"Pod {report['pod']} (scheduler {report['scheduler']}): {report['state']}"]
    if report["state"] == "fits":
        lines.append(f"  {report['detail']}")
        return "\n".join(lines) + "\n"
    lines.append(f"  stopped at: {report['stage']}")
    if report["groups"]:
        lines.append("  nodes, by the first filter that rejects them:")
        for g in report["groups"]:
            lines.append(
                f"    {g['nodes']:>5} node(s): {g['reason']}  [{g['plugin']}, {g['kind']}]"
            )
    else:
        lines.append(f"  {report['message']}")
    lines.append(f"  binding constraint: {report['binding']}")
    lines.append(f"    {report['detail']}")
    if report["closest"]:
        lines.append("  closest nodes:")
        for c in report["closest"]:
            why = "; ".join(f"{b['reason']} [{b['plugin']}]" for b in c["blockers"])
            lines.append(f"    {c['node']}: {why}")
    if report["changes"]:
        lines.append(
            "  smallest changes that let it fit (each verified by re-running the plugins):"
        )
        for ch in report["changes"]:
            lines.append(f"    - {ch['text']}")
    for note in report.get("notes", ()):
        lines.append(f"  note: {note}")
    return "\n".join(lines) + "\n"
