"""Reads dcgm-exporter's per-card metrics through the Prometheus HTTP API (aiohttp) into
CardReadings, one instant query per configured metric per refresh.

**What is asked.** For each non-empty query Q of `telemetry.queries` one instant query,
with BY the card labels (`hostLabels`, `gpuLabel`, `uuidLabel`)::

    label_replace(max by (BY) (Q), "gpusched_sample", "value", "", "")
      or label_replace(max by (BY) (timestamp(Q)), "gpusched_sample", "time", "", "")

An instant query answers each series with the *evaluation* time, not the time its sample
was scraped (Prometheus looks back up to 5 minutes for a sample); `timestamp(Q)` gives
the sample's own time, and asking both in one query keeps them from the same evaluation.
Aggregating by the card labels answers one series per card carrying only those labels:
dcgm-exporter's other labels (model, PCI bus, driver, pod, MIG instance, err_msg) would
double the JSON to parse, measured 5.4 MB and 1.4 s against 2.5 MB and 0.3-0.7 s per
query for 8,000 cards.
A reading's age is measured on Prometheus' clock (evaluation time minus sample time) and
placed on ours (`at = our now - age`), so a skew between the two hosts' clocks does not
make data look fresher or older than it is. (For a query that aggregates, `timestamp()`
is the evaluation time: keep the queries plain selectors, as the defaults are.) Queries
longer than MAX_GET_QUERY characters go as a POST form, as the API allows.

**Grouping.** Series are grouped per card by (host label, `gpu` label, UUID label); the
host label is the first of `hostLabels` a series carries (dcgm-exporter's `Hostname`, its
main branch's `hostname`). A series naming neither a UUID nor a host and index names no
card and is counted (`unlabelled`). Several series of one metric for one card
(dcgm-exporter repeats a card per pod sharing it, per MIG instance, or two scrape jobs
read one exporter) combine in the query to the highest value (free frame buffer: the
lowest), the cautious reading for a thermal filter, with the newest of their sample times;
should two answers still name one card (a user's query that aggregates otherwise), the
newest sample wins, then the cautious value.

**Sample times.** One exporter scrape stamps all of a card's metrics alike; when they
differ (metrics from different scrape jobs) a card's reading carries the *newest* sample
time, and a value whose own sample is already older than `staleAfterSeconds` when read is
dropped (unknown) rather than carried with a fresher time. No value is ever used more than
2 x `staleAfterSeconds` after it was sampled, and in the usual one-scrape case no more
than `staleAfterSeconds`.

**Values.** Temperatures in °C, power in W, utilisation in %, frame buffer in MiB (as
dcgm-exporter exports them). `NaN`, `+Inf`, `-Inf` and DCGM's "blank" sentinels (values
from DCGM_INT32_BLANK up, which old exporters printed for fields a card does not support,
e.g. 9223372036854775794 for the memory temperature of a GeForce) are unknown (NaN). A
metric not read (its query failed, or nothing exports it, like the power limit, which is
not among dcgm-exporter's default counters) is NaN; an unread XID is XID_UNKNOWN, which
neither marks a card sick nor clears it.

**Failures.** A refused connection, a timeout, an HTTP error, a body that is not the
API's JSON, or a query error (`{"status": "error", "errorType": ..., "error": ...}`, e.g.
a typo in a configured query) become a `Problem` for that query; the other queries are
still read. A bearer token file that cannot be read, or a CA file that does not load,
fails the whole refresh. Nothing read earlier is reused: the caller's previous readings age
and go stale on their own. The bearer token file is re-read at every refresh (projected
ServiceAccount tokens rotate); the CA file again whenever it changes.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

import aiohttp
import orjson

from gpusched.config.settings import Telemetry, TelemetryQueries
from gpusched.model.telemetry import NAN, NO_XID, XID_UNKNOWN, CardReading

# Beyond this many characters a query goes as a POST form (URLs past ~8 KiB are refused by
# some proxies; the API accepts the same parameters form-encoded).
MAX_GET_QUERY: Final = 2000
# The label the query adds to tell a value series from its sample-time twin.
SAMPLE_LABEL: Final = "gpusched_sample"
# DCGM's "blank" values start at DCGM_INT32_BLANK (0x7ffffff0); the int64 and float
# blanks (0x7ffffffffffffff0, 2**47) are larger. No reading of ours comes close.
DCGM_BLANK: Final = float(0x7FFFFFF0)
# Problems reported for the whole refresh rather than one query.
ALL_QUERIES: Final = "*"

# CardReading field each query fills (TelemetryQueries field -> CardReading field).
_FIELDS: Final = {
    "gpu_temp": "gpu_temp",
    "memory_temp": "memory_temp",
    "power_usage": "power_w",
    "power_limit": "power_limit_w",
    "gpu_util": "util_pct",
    "fb_free": "fb_free_mib",
    "fb_used": "fb_used_mib",
    "xid_errors": "xid",
}
# Several series for one card: the lowest of these is the cautious value, else the highest.
_LOWEST_WINS: Final = frozenset({"fb_free_mib"})


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a query (or, with query ALL_QUERIES, the whole refresh) gave nothing."""

    query: str  # the camelCase name in `telemetry.queries` (gpuTemp, ...) or ALL_QUERIES
    reason: str  # connection | timeout | http | response | query | token | tls
    message: str


@dataclass(slots=True)
class ReadResult:
    readings: list[CardReading] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # Prometheus' own warnings
    series: int = 0  # value series read, all queries
    unlabelled: int = 0  # value series naming no card (no UUID, and no host + index)
    seconds: float = 0.0  # how long the refresh took


def wrapped_query(query: str, by: Sequence[str], lowest: bool = False) -> str:
    """The instant query asking `query`'s values per card (labels `by`: the highest of a
    card's series, or with `lowest` the lowest) and their newest sample times at once."""
    keys = ", ".join(dict.fromkeys(by))
    agg = "min" if lowest else "max"
    return (
        f'label_replace({agg} by ({keys}) ({query}), "{SAMPLE_LABEL}", "value", "", "")'
        f' or label_replace(max by ({keys}) (timestamp({query})), "{SAMPLE_LABEL}", "time",'
        ' "", "")'
    )


def card_labels(settings: Telemetry) -> tuple[str, ...]:
    """The labels naming a card, which the queries aggregate by."""
    return (*settings.host_labels, settings.gpu_label, settings.uuid_label)


def configured_queries(queries: TelemetryQueries) -> dict[str, str]:
    """TelemetryQueries field -> PromQL, the empty ones left out (not asked)."""
    return {
        f.name: str(getattr(queries, f.name)).strip()
        for f in fields(queries)
        if str(getattr(queries, f.name)).strip()
    }


def query_name(field_name: str) -> str:
    """`gpu_temp` -> `gpuTemp`: the key a user wrote in `telemetry.queries`."""
    head, *rest = field_name.split("_")
    return head + "".join(p.title() for p in rest)


# -- the API's JSON --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Mapping[str, str]  # without SAMPLE_LABEL
    value: float
    sampled_at: float  # Prometheus' clock
    evaluated_at: float  # Prometheus' clock


def _number(text: object) -> float:
    """One sample value: the API sends them as strings ("NaN", "+Inf" included)."""
    if not isinstance(text, str | int | float) or isinstance(text, bool):
        raise ValueError(f"sample value {text!r} is not a number string")
    return float(text)


def parse_body(
    query: str, status: int, body: bytes
) -> tuple[list[Sample] | None, Problem | None, list[str]]:
    """The samples of one wrapped query's answer, or the problem; and Prometheus' warnings.

    A value series pairs with its `timestamp()` twin (same labels but the SAMPLE_LABEL);
    a value without a twin counts as sampled at the evaluation time."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if status >= 400:
            return None, Problem(query, "http", f"HTTP {status}: {_snippet(body)}"), []
        return None, Problem(query, "response", f"not JSON ({exc}): {_snippet(body)}"), []
    if not isinstance(doc, dict):
        return None, Problem(query, "response", f"not a JSON object: {_snippet(body)}"), []
    warnings = [str(w) for w in doc.get("warnings") or () if w]
    if doc.get("status") == "error":
        kind = doc.get("errorType") or f"HTTP {status}"
        return None, Problem(query, "query", f"{kind}: {doc.get('error', '')}".strip()), warnings
    if status >= 400:
        return None, Problem(query, "http", f"HTTP {status}: {_snippet(body)}"), warnings
    data = doc.get("data")
    if doc.get("status") != "success" or not isinstance(data, dict):
        return None, Problem(query, "response", f"unexpected answer: {_snippet(body)}"), warnings
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        kind = data.get("resultType")
        problem = Problem(query, "query", f"result type {kind!r}, want an instant vector")
        return None, problem, warnings
    try:
        return _pair(data["result"]), None, warnings
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        return None, Problem(query, "response", f"malformed series ({exc!r})"), warnings


def _pair(result: list[Any]) -> list[Sample]:
    values: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], float, float]] = {}
    times: dict[tuple[tuple[str, str], ...], float] = {}
    for series in result:
        labels = {str(k): str(v) for k, v in series["metric"].items()}
        evaluated, raw = series["value"]
        kind = labels.pop(SAMPLE_LABEL, "value")
        labels.pop("__name__", None)  # timestamp() drops it: pair without it
        key = tuple(sorted(labels.items()))
        if kind == "time":
            times[key] = _number(raw)
        else:
            values[key] = (labels, _number(raw), float(evaluated))
    return [
        Sample(labels, value, times.get(key, evaluated), evaluated)
        for key, (labels, value, evaluated) in values.items()
    ]


def _snippet(body: bytes, limit: int = 200) -> str:
    text = body.decode("utf-8", "replace").strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


# -- series -> cards -------------------------------------------------------------------------


@dataclass(slots=True)
class _Card:
    at: float = -math.inf
    values: dict[str, tuple[float, float]] = field(default_factory=dict)  # field -> (at, v)


def card_key(labels: Mapping[str, str], settings: Telemetry) -> tuple[str, int, str] | None:
    """(host, gpu index, uuid) a series names, or None when it names no card."""
    host = next((labels[k] for k in settings.host_labels if labels.get(k)), "")
    uuid = labels.get(settings.uuid_label, "")
    try:
        gpu = int(labels.get(settings.gpu_label, ""))
    except ValueError:
        gpu = -1
    if gpu < 0:
        gpu = -1
    if not uuid and not (host and gpu >= 0):
        return None
    return host, gpu, uuid


def _usable(value: float) -> float:
    if not math.isfinite(value) or abs(value) >= DCGM_BLANK:
        return NAN
    return value


def combine(
    samples: Mapping[str, Sequence[Sample]],
    settings: Telemetry,
    now: float,
) -> tuple[list[CardReading], int]:
    """CardReadings from each query's samples (TelemetryQueries field -> samples), on our
    clock `now` (the moment the answers arrived); and the number of series naming no card.
    Queries absent from `samples` (failed, or not asked) leave their value unknown."""
    cards: dict[tuple[str, int, str], _Card] = {}
    unlabelled = 0
    limit = settings.stale_after_seconds
    for query, series in samples.items():
        target = _FIELDS[query]
        for s in series:
            key = card_key(s.labels, settings)
            if key is None:
                unlabelled += 1
                continue
            age = max(0.0, s.evaluated_at - s.sampled_at)
            if age > limit:
                continue  # older than the staleness limit already: unknown, not carried
            at = now - age
            value = _usable(s.value)
            card = cards.setdefault(key, _Card())
            card.at = max(card.at, at)
            held = card.values.get(target)
            if held is None or _better(target, (at, value), held):
                card.values[target] = (at, value)
    out = []
    for (host, gpu, uuid), card in cards.items():
        kw: dict[str, Any] = {}
        for target, (_, value) in card.values.items():
            if target == "xid":
                kw["xid"] = XID_UNKNOWN if math.isnan(value) else max(NO_XID, int(value))
            else:
                kw[target] = value
        if "xid" not in kw:
            kw["xid"] = XID_UNKNOWN
        out.append(CardReading(host=host, gpu=gpu, uuid=uuid, at=card.at, **kw))
    return out, unlabelled


def _better(target: str, new: tuple[float, float], held: tuple[float, float]) -> bool:
    """Whether sample `new` (at, value) replaces `held` for one card and metric."""
    if new[0] != held[0]:
        return new[0] > held[0]
    if math.isnan(held[1]):
        return not math.isnan(new[1])
    if math.isnan(new[1]):
        return False
    return new[1] < held[1] if target in _LOWEST_WINS else new[1] > held[1]


# -- the reader ------------------------------------------------------------------------------


class PrometheusReader:
    """One `read()` per refresh; `close()` when done. Not thread-safe; one event loop."""

    def __init__(
        self,
        settings: Telemetry,
        *,
        clock: Callable[[], float] = time.time,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        if not settings.prometheus_url:
            raise ValueError("telemetry.prometheusUrl is empty: nothing to read")
        self.settings = settings
        self.clock = clock
        self.url = settings.prometheus_url.rstrip("/") + "/api/v1/query"
        self.queries = configured_queries(settings.queries)
        self.by = card_labels(settings)
        self._session = session
        self._own_session = session is None
        self._ssl: ssl.SSLContext | None = None
        self._ssl_stamp: tuple[int, int] | None = None

    async def close(self) -> None:
        if self._session is not None and self._own_session:
            await self._session.close()
        self._session = None

    async def read(self) -> ReadResult:
        t0 = time.perf_counter()
        result = ReadResult()
        headers = {"Accept": "application/json"}
        try:
            token = self._token()
            tls = self._tls()
        except _RefreshError as exc:
            result.problems.append(exc.problem)
            result.seconds = time.perf_counter() - t0
            return result
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if self._session is None:
            self._session = aiohttp.ClientSession()
        answers = await asyncio.gather(
            *(self._ask(name, q, headers, tls) for name, q in self.queries.items())
        )
        now = self.clock()
        # Decoding is pure CPU (about 0.3 s a query for 8,000 cards): in a worker thread,
        # so the scheduling loop keeps its turns meanwhile.
        await asyncio.to_thread(self._decode, answers, now, result)
        result.seconds = time.perf_counter() - t0
        return result

    def _decode(
        self, answers: Sequence[tuple[int, bytes] | Problem], now: float, result: ReadResult
    ) -> None:
        samples: dict[str, list[Sample]] = {}
        for name, answer in zip(self.queries, answers, strict=True):
            if isinstance(answer, Problem):
                result.problems.append(answer)
                continue
            got, problem, warnings = parse_body(query_name(name), *answer)
            result.warnings.extend(warnings)
            if problem is not None:
                result.problems.append(problem)
            elif got is not None:
                samples[name] = got
                result.series += len(got)
        result.readings, result.unlabelled = combine(samples, self.settings, now)

    async def _ask(
        self, name: str, query: str, headers: dict[str, str], tls: ssl.SSLContext | None
    ) -> tuple[int, bytes] | Problem:
        """The answer's status and body, or why there is none."""
        assert self._session is not None
        label = query_name(name)
        timeout = self.settings.query_timeout_seconds
        # Plain seconds: the API parses a number as seconds, while its duration syntax
        # takes whole units only ("0.5s" is refused as bad_data; "500ms" would do).
        wrapped = wrapped_query(query, self.by, lowest=_FIELDS[name] in _LOWEST_WINS)
        params = {"query": wrapped, "timeout": f"{timeout:g}"}
        kw: dict[str, Any] = {
            "headers": headers,
            "ssl": tls or True,
            "timeout": aiohttp.ClientTimeout(total=timeout),
        }
        try:
            if len(params["query"]) > MAX_GET_QUERY:
                call = self._session.post(self.url, data=params, **kw)
            else:
                call = self._session.get(self.url, params=params, **kw)
            async with call as response:
                body = await response.read()
                status = response.status
        except TimeoutError:
            return Problem(label, "timeout", f"no answer within {timeout:g} s")
        except aiohttp.ClientSSLError as exc:
            return Problem(label, "tls", str(exc))
        except (aiohttp.ClientError, OSError) as exc:
            return Problem(label, "connection", _describe(exc))
        return status, body

    def _token(self) -> str:
        path = self.settings.bearer_token_file
        if not path:
            return ""
        try:
            token = Path(path).read_text().strip()
        except OSError as exc:
            raise _RefreshError(
                Problem(ALL_QUERIES, "token", f"bearer token file {path}: {exc.strerror or exc}")
            ) from None
        if not token:
            raise _RefreshError(Problem(ALL_QUERIES, "token", f"bearer token file {path} is empty"))
        return token

    def _tls(self) -> ssl.SSLContext | None:
        path = self.settings.ca_file
        if not path:
            return None
        try:
            st = Path(path).stat()
            stamp = (st.st_mtime_ns, st.st_size)
            if self._ssl is None or stamp != self._ssl_stamp:
                self._ssl = ssl.create_default_context(cafile=path)
                self._ssl_stamp = stamp
        except (OSError, ssl.SSLError) as exc:
            self._ssl = None
            raise _RefreshError(Problem(ALL_QUERIES, "tls", f"CA file {path}: {exc}")) from None
        return self._ssl


class _RefreshError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def _describe(exc: BaseException) -> str:
    """A connection error without the per-attempt noise (ports of ephemeral sockets)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {exc.host}:{exc.port} ({exc.os_error.strerror or exc.os_error})"
    return f"{type(exc).__name__}: {exc}"
