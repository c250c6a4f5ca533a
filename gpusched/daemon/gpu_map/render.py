"""The GPU map as HTML and as JSON, from view.py's data.

The page is self-contained (inline CSS, one small inline script, no fonts or CDN): it must
open through a `kubectl port-forward` on a machine without internet access. Every string
that comes from the cluster (node, pod, rack and quota names, scheduler messages, models)
goes through `esc` (html.escape with quotes), and the script embeds no data at all: it
only fetches map.json, so no cluster string is ever parsed as script. The Content-Security-
Policy routes.py sends allows exactly this script (by its hash) and same-origin fetches.
"""

from __future__ import annotations

import base64
import hashlib
import html
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import orjson

from gpusched.daemon.gpu_map.view import (
    FREE,
    HOT,
    NO_DATA,
    SHARED,
    WHOLE,
    CardView,
    GangView,
    MapData,
    NodeView,
    PendingView,
    QuotaRow,
    QuotaView,
    temperature_class,
)
from gpusched.model import quota
from gpusched.model.node import FULL_CARD_MILLI

NO_RACK = "(no rack label)"
POLL_MS = 5000  # the inline script's map.json poll
ROOMY_NODES = 64  # up to this many nodes on the page, cells are drawn larger


def esc(value: object) -> str:
    """Text or attribute value from the cluster, made inert (<, >, &, " and ')."""
    return html.escape(str(value), quote=True)


# -- JSON ---------------------------------------------------------------------------------


def payload(data: MapData) -> dict[str, Any]:
    """map.json: the view dataclasses as they are (orjson writes dataclasses natively, a
    missing reading as null), with `stamp` and the page's thresholds. A card's temperature
    class follows from `red_line_celsius` and `cool_celsius` (view.temperature_class)."""
    return {
        "stamp": stamp(data),
        "generated_at": data.generated_at,
        "leading": data.leading,
        "telemetry": data.telemetry,
        "red_line_celsius": data.red_line,
        "cool_celsius": data.cool,
        "page": data.page,
        "pages": data.pages,
        "nodes_total": data.nodes_total,
        "nodes": data.nodes,
        "pending": {
            "total": data.pending_total,
            "by_reason": dict(data.pending_by_reason),
            "shown": data.pending,
        },
        "gangs": data.gangs,
        "quotas": data.quotas,
    }


def to_json_bytes(data: MapData) -> bytes:
    return orjson.dumps(payload(data))


def stamp(data: MapData) -> str:
    """Changes whenever anything shown changes (not the clock): the script swaps the map
    only then. Python's hash of the frozen views, so it is one process's: a restarted
    daemon's page reloads once. Readings are None when missing, never NaN (whose hash is
    its identity)."""
    key = (
        data.nodes,
        data.pending,
        data.pending_total,
        tuple(sorted(data.pending_by_reason.items())),
        data.gangs,
        data.quotas,
        data.red_line,
        data.cool,
        data.telemetry,
        data.leading,
        data.page,
        data.pages,
        data.nodes_total,
    )
    return f"{hash(key) & 0xFFFFFFFFFFFFFFFF:016x}"


# -- HTML ---------------------------------------------------------------------------------

_CSS = """
*{box-sizing:border-box}
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;
background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:8px 16px;display:flex;gap:16px;
align-items:baseline;flex-wrap:wrap}
header h1{font-size:17px;margin:0}
header .meta{color:#c9d1e0}
main{padding:8px 16px 24px}
h2{font-size:15px;margin:18px 0 6px}
h3{font-size:13px;margin:10px 0 4px;color:#3b4456}
.banner{background:#fff4d6;border:1px solid #e8c66a;padding:6px 10px;margin:8px 0}
.legend{display:flex;flex-wrap:wrap;gap:14px;align-items:center;background:#fff;
border:1px solid #dde1e8;padding:6px 10px}
.legend span.item{display:inline-flex;gap:5px;align-items:center}
.stats{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0}
.stat{background:#fff;border:1px solid #dde1e8;padding:4px 10px;border-radius:3px}
.stat b{font-size:15px}
.rack{background:#fff;border:1px solid #dde1e8;margin:6px 0;padding:2px 8px 6px}
.nodes{display:flex;flex-wrap:wrap;gap:4px}
.node{border:1px solid #e3e6ec;padding:2px 4px;border-radius:3px;background:#fbfbfc}
.node.cordoned{background:repeating-linear-gradient(45deg,#fbfbfc 0 4px,#eceef2 4px 8px)}
.node .name{display:block;font-size:10px;color:#46506a;white-space:nowrap;max-width:150px;
overflow:hidden;text-overflow:ellipsis}
.cards{display:flex;gap:2px}
.card{display:inline-block;width:12px;height:18px;border:1px solid #9aa3b5;
border-top-width:4px;border-radius:2px;background:#fff}
.roomy .card{width:20px;height:30px;border-top-width:6px}
.card.free{background:#e6f4ea;border-color:#8cc79c}
.card.whole{background:#2456a6;border-color:#173a73}
.card.shared{border-color:#c46a00;background:linear-gradient(to top,#f08c00 var(--u),
#fff1dc var(--u))}
.card.sick{background:#555;border-color:#222}
.card.t-cool{border-top-color:#3a9ad9}
.card.t-warm{border-top-color:#f2b400}
.card.t-hot{border-top-color:#d62828;box-shadow:0 0 0 1px #d62828}
.card.t-nodata{border-top-color:#b9bec9;border-top-style:dotted}
table{border-collapse:collapse;background:#fff;width:100%;margin:4px 0}
th,td{border:1px solid #dde1e8;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#eef0f4}
td.msg{max-width:640px;word-break:break-word}
.bar{display:inline-block;width:120px;height:10px;background:#eef0f4;border:1px solid #c4c9d4;
position:relative;vertical-align:middle}
.bar i{position:absolute;left:0;top:0;bottom:0;background:#2456a6;width:var(--u)}
.bar.over i{background:#f08c00}
.bar.full i{background:#d62828}
.bar b{position:absolute;top:-2px;bottom:-2px;width:2px;background:#1d2330;left:var(--m)}
.ok{color:#1b7f3b}
.bad{color:#b3261e}
.muted{color:#7a8397}
nav.pages a{margin-right:8px}
"""

# Polls map.json; when what is shown changed (its stamp), fetches this page again and swaps
# <main> (DOMParser runs no script). It embeds no data: see the module docstring.
SCRIPT = (
    "(function(){var b=document.body,busy=false;"
    "function tick(){var p=document.getElementById('pause');if(busy||(p&&p.checked))return;"
    "busy=true;var q=location.search;"
    "fetch('map.json'+q,{cache:'no-store'}).then(function(r){return r.json();})"
    ".then(function(d){document.getElementById('asof').textContent="
    "new Date(d.generated_at*1000).toLocaleTimeString();"
    "if(d.stamp===b.dataset.stamp)return;"
    "return fetch('map'+q,{cache:'no-store'}).then(function(r){return r.text();})"
    ".then(function(t){var n=new DOMParser().parseFromString(t,'text/html');"
    "var m=n.getElementById('map');if(!m)return;"
    "document.getElementById('map').replaceWith(m);b.dataset.stamp=n.body.dataset.stamp;});})"
    ".catch(function(){}).then(function(){busy=false;});}"
    f"setInterval(tick,{POLL_MS});}})();"
)
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()


# A node's HTML by (node view, red line, cool): the nodes that did not change since the
# last render (most of them, on a large cluster) are not formatted again.
Fragments = dict[tuple[NodeView, float, float], str]


def render_html(data: MapData, fragments: Fragments | None = None) -> str:
    """The page. `fragments`: the previous render's node HTML, reused where a node is
    unchanged and replaced by this render's (so it holds one page of nodes at most)."""
    parts: list[str] = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        "<title>gpusched GPU map</title><style>",
        _CSS,
        f'</style></head><body data-stamp="{esc(stamp(data))}">',
        "<header><h1>gpusched GPU map</h1>",
        f'<span class="meta">as of <span id="asof">{esc(_clock(data.generated_at))}</span>',
        f" · this replica {'schedules (leader)' if data.leading else 'is a standby'}</span>",
        '<label class="meta"><input type="checkbox" id="pause"> pause updates</label>',
        '<span class="meta"><a style="color:#c9d1e0" href="map.json">map.json</a></span>',
        '</header><main id="map">',
    ]
    parts.extend(_banners(data))
    parts.append(_legend(data))
    parts.append(_stats(data))
    parts.extend(_nodes(data, {} if fragments is None else fragments))
    parts.extend(_pending(data))
    parts.extend(_gangs(data.gangs))
    parts.extend(_quotas(data.quotas))
    parts.append(f"</main><script>{SCRIPT}</script></body></html>")
    return "".join(parts)


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)) if at else "-"


def _banners(data: MapData) -> Iterable[str]:
    if not data.telemetry:
        yield (
            '<p class="banner" id="no-telemetry">No GPU telemetry is configured'
            " (telemetry.prometheusURL): every temperature is <b>no data</b>, not cool.</p>"
        )
    if not data.leading:
        yield (
            '<p class="banner">This replica does not hold the leader Lease: the map is its own'
            " cache (bindings it sees), and pending reasons are the leader's to give.</p>"
        )


def _cell(card: CardView, data: MapData) -> str:
    temp_cls = temperature_class(card.temp, data.red_line, data.cool)
    classes = ["card", card.use, f"t-{temp_cls}"]
    if not card.healthy:
        classes.append("sick")
    temp = "no data" if temp_cls == NO_DATA else f"{card.temp:.0f} °C"
    if card.use == WHOLE:
        use = "whole card"
    elif card.use == SHARED:
        use = f"shared, {card.used_milli}m of {FULL_CARD_MILLI}m used"
    else:
        use = "free"
    title = f"card {card.index} ({card.model}): {use}; temperature {temp}"
    if not card.healthy:
        title += "; out of service"
    if card.pods:
        title += "; " + ", ".join(card.pods[:6]) + (" …" if len(card.pods) > 6 else "")
    style = f' style="--u:{card.share * 100:.0f}%"' if card.use == SHARED else ""
    return (
        f'<span class="{" ".join(classes)}" data-card="{card.index}"'
        f' data-milli="{card.used_milli}"{style} title="{esc(title)}"></span>'
    )


def _legend(data: MapData) -> str:
    def item(classes: str, text: str, style: str = "") -> str:
        return f'<span class="item"><span class="{classes}"{style}></span>{esc(text)}</span>'

    return (
        '<section class="legend" id="legend"><b>Cards</b>'
        + item("card free t-cool", "free")
        + item("card whole t-cool", "whole card in use")
        + item("card shared t-cool", "shared: the fill is the share used", ' style="--u:40%"')
        + item("card sick t-cool", "out of service")
        + "<b>Top edge: temperature</b>"
        + item("card free t-cool", f"below {data.cool:g} °C")
        + item("card free t-warm", f"{data.cool:g}-{data.red_line:g} °C")
        + item("card free t-hot", f"at or above the {data.red_line:g} °C red line")
        + item("card free t-nodata", "no data (not cool: unknown)")
        + "</section>"
    )


def _stats(data: MapData) -> str:
    cards = [c for n in data.nodes for c in n.cards]
    uses = Counter(c.use for c in cards)
    used = sum(min(c.used_milli, FULL_CARD_MILLI) for c in cards) / FULL_CARD_MILLI
    temps = Counter(temperature_class(c.temp, data.red_line, data.cool) for c in cards)
    share = f"{100 * used / len(cards):.1f} %" if cards else "-"
    items = [
        ("nodes", str(data.nodes_total)),
        ("cards", str(len(cards))),
        ("GPUs allocated", f"{used:g} ({share})"),
        ("free / whole / shared cards", f"{uses[FREE]} / {uses[WHOLE]} / {uses[SHARED]}"),
        (f"cards at {data.red_line:g} °C or more", str(temps[HOT])),
        ("cards without temperature", str(temps[NO_DATA])),
        ("pending pods", str(data.pending_total)),
    ]
    body = "".join(f'<span class="stat">{esc(k)}: <b>{esc(v)}</b></span>' for k, v in items)
    return f'<section class="stats" id="stats">{body}</section>'


def _nodes(data: MapData, fragments: Fragments) -> Iterable[str]:
    # A small cluster gets bigger cells; a large one stays compact enough to scan.
    roomy = ' class="roomy"' if len(data.nodes) <= ROOMY_NODES else ""
    yield f'<section id="nodes"{roomy}><h2>Nodes &times; cards</h2>'
    if data.pages > 1:
        links = " ".join(
            f'<a href="map?page={i}">{i + 1}</a>' if i != data.page else f"<b>{i + 1}</b>"
            for i in range(data.pages)
        )
        yield f'<nav class="pages">pages: {links}</nav>'
    if not data.nodes:
        yield '<p class="muted">No node in the scheduler\'s cache yet.</p>'
    fresh: Fragments = {}
    racks: dict[str, list[NodeView]] = {}
    for node in data.nodes:
        racks.setdefault(node.rack, []).append(node)
    for rack, nodes in racks.items():
        cards = [c for n in nodes for c in n.cards]
        used = sum(min(c.used_milli, FULL_CARD_MILLI) for c in cards) / FULL_CARD_MILLI
        yield (
            f'<div class="rack" data-rack="{esc(rack)}"><h3>rack {esc(rack or NO_RACK)}'
            f' <span class="muted">· {len(nodes)} nodes · {used:g}/{len(cards)} GPUs'
            ' allocated</span></h3><div class="nodes">'
        )
        for node in nodes:
            key = (node, data.red_line, data.cool)
            fragment = fragments.get(key)
            if fragment is None:
                fragment = _node(node, data)
            fresh[key] = fragment
            yield fragment
        yield "</div></div>"
    yield "</section>"
    fragments.clear()
    fragments.update(fresh)


def _node(node: NodeView, data: MapData) -> str:
    temp = "no data" if node.temp is None else f"hottest {node.temp:.0f} °C"
    cls = "node cordoned" if node.cordoned else "node"
    title = f"{node.name}: {len(node.cards)} cards, {temp}"
    if node.cordoned:
        title += ", cordoned"
    cells = "".join(_cell(c, data) for c in node.cards)
    if not node.cards:
        cells = '<span class="muted">no GPU</span>'
    return (
        f'<div class="{cls}" data-node="{esc(node.name)}" title="{esc(title)}">'
        f'<span class="name">{esc(node.name)}</span>'
        f'<span class="cards">{cells}</span></div>'
    )


def _pending(data: MapData) -> Iterable[str]:
    yield f'<section id="pending"><h2>Pending pods ({data.pending_total})</h2>'
    if data.pending_by_reason:
        counts = ", ".join(
            f"{esc(reason or 'not attempted yet')}: {n}"
            for reason, n in sorted(data.pending_by_reason.items())
        )
        yield f'<p class="muted">{counts}</p>'
    if not data.pending:
        yield '<p class="muted">None.</p></section>'
        return
    yield (
        "<table><thead><tr><th>pod</th><th>queue</th><th>asks for</th><th>attempts</th>"
        "<th>reason</th><th>latest message</th></tr></thead><tbody>"
    )
    for p in data.pending:
        yield _pending_row(p)
    yield "</tbody></table>"
    if data.pending_total > len(data.pending):
        yield (
            f'<p class="muted">… and {data.pending_total - len(data.pending)} more'
            " (map.json lists the same first ones).</p>"
        )
    yield "</section>"


def _pending_row(p: PendingView) -> str:
    return (
        f'<tr class="pending-pod" data-pod="{esc(p.pod)}"><td>{esc(p.pod)}</td>'
        f"<td>{esc(p.queue)}</td><td>{esc(p.request)}</td><td>{p.attempts}</td>"
        f'<td class="reason">{esc(p.reason or "-")}</td>'
        f'<td class="msg">{esc(p.message or "not attempted yet")}</td></tr>'
    )


def _gangs(gangs: tuple[GangView, ...]) -> Iterable[str]:
    yield f'<section id="gangs"><h2>Gangs ({len(gangs)} PodGroups)</h2>'
    if not gangs:
        yield '<p class="muted">No PodGroup.</p></section>'
        return
    yield (
        "<table><thead><tr><th>PodGroup</th><th>API</th><th>bound / minMember</th>"
        "<th>running</th><th>pending</th><th>finished</th><th>latest refusal</th></tr>"
        "</thead><tbody>"
    )
    for g in gangs:
        ok = g.bound + g.finished >= g.min_member
        note = g.problem or (f"{g.reason}: {g.message}" if g.reason else "")
        yield (
            f'<tr class="gang" data-gang="{esc(g.key)}"><td>{esc(g.key)}</td>'
            f"<td>{esc(g.api)}</td>"
            f'<td class="members {"ok" if ok else "bad"}">{g.bound} / {g.min_member}</td>'
            f"<td>{g.running}</td><td>{g.pending}</td><td>{g.finished}</td>"
            f'<td class="msg">{esc(note or "-")}</td></tr>'
        )
    yield "</tbody></table></section>"


def amount(resource: str, value: int) -> str:
    """One quota amount in the unit people read (model/quota.py's units in)."""
    if resource in (quota.GPU, quota.CPU):
        return f"{value / 1000:g}"
    if resource == quota.GPU_MEMORY:
        return f"{value / 1024:g} GiB"
    if resource == quota.MEMORY:
        return f"{value / 2**30:.3g} GiB"
    return str(value)


def _bar(row: QuotaRow) -> str:
    top = row.max if row.max else (row.min or 0)
    if not top:
        return ""
    cls = "bar"
    if row.max is not None and row.used >= row.max:
        cls += " full"
    elif row.min is not None and row.used > row.min:
        cls += " over"  # borrowing above its guaranteed min
    width = min(row.used / top, 1.0) * 100
    mark = ""
    if row.min is not None and row.max:
        mark = f'<b style="--m:{min(row.min / row.max, 1.0) * 100:.0f}%"></b>'
    return f'<span class="{cls}"><i style="--u:{width:.0f}%"></i>{mark}</span>'


def _quotas(quotas: tuple[QuotaView, ...]) -> Iterable[str]:
    yield f'<section id="quotas"><h2>Quotas ({len(quotas)} ElasticQuotas)</h2>'
    if not quotas:
        yield '<p class="muted">No ElasticQuota.</p></section>'
        return
    yield (
        "<table><thead><tr><th>ElasticQuota</th><th>tenant</th><th>resource</th><th>used</th>"
        "<th>min</th><th>max</th><th></th></tr></thead><tbody>"
    )
    for q in quotas:
        rows = q.rows or (QuotaRow(quota.GPU, 0),)
        span = len(rows) + (1 if q.problem else 0)
        head = f'<td rowspan="{span}">{esc(q.key)}</td><td rowspan="{span}">{esc(q.tenant)}</td>'
        for i, r in enumerate(rows):
            unset = '<span class="muted">-</span>'
            yield (
                f'<tr class="quota" data-quota="{esc(q.key)}" data-resource="{esc(r.resource)}">'
                f"{head if i == 0 else ''}<td>{esc(r.resource)}</td>"
                f'<td class="used">{esc(amount(r.resource, r.used))}</td>'
                f"<td>{esc(amount(r.resource, r.min)) if r.min is not None else unset}</td>"
                f"<td>{esc(amount(r.resource, r.max)) if r.max is not None else unset}</td>"
                f"<td>{_bar(r)}</td></tr>"
            )
        if q.problem:
            yield f'<tr><td colspan="5" class="msg bad">{esc(q.problem)}</td></tr>'
    yield "</tbody></table></section>"
