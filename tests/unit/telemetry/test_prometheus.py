"""The Prometheus reader: the API's JSON, series grouped per card, sample times on our
clock, failures as problems; the HTTP side against a small aiohttp server standing in for
Prometheus' API (the real Prometheus is in tests/integration/test_telemetry.py)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from gpusched.config.settings import Telemetry, TelemetryQueries
from gpusched.devcluster.processes import free_port
from gpusched.model.telemetry import NO_XID, XID_UNKNOWN
from gpusched.telemetry.prometheus import (
    ALL_QUERIES,
    MAX_GET_QUERY,
    SAMPLE_LABEL,
    PrometheusReader,
    Sample,
    card_labels,
    combine,
    parse_body,
    query_name,
    wrapped_query,
)

SETTINGS = Telemetry(prometheus_url="http://127.0.0.1:9", stale_after_seconds=60.0)
GPU = {"gpu": "0", "UUID": "GPU-aa", "Hostname": "node-a", "modelName": "NVIDIA H100"}


def _series(labels: dict[str, str], value: str, evaluated: float, kind: str = "value") -> Any:
    metric = {**labels, SAMPLE_LABEL: kind}
    if kind == "value":
        metric["__name__"] = "DCGM_FI_DEV_GPU_TEMP"
    return {"metric": metric, "value": [evaluated, value]}


def _ok(*series: Any, warnings: list[str] | None = None) -> bytes:
    doc: dict[str, Any] = {"status": "success", "data": {"resultType": "vector", "result": series}}
    if warnings:
        doc["warnings"] = warnings
    return orjson.dumps(doc)


# -- the JSON --------------------------------------------------------------------------------


def test_a_value_pairs_with_its_sample_time_twin() -> None:
    body = _ok(
        _series(GPU, "71", 1000.0),
        _series(GPU, "990.5", 1000.0, kind="time"),
        _series({**GPU, "gpu": "1", "UUID": "GPU-bb"}, "NaN", 1000.0),
    )
    samples, problem, warnings = parse_body("gpuTemp", 200, body)
    assert problem is None and warnings == []
    assert samples is not None
    by_gpu = {s.labels["gpu"]: s for s in samples}
    assert by_gpu["0"].value == 71.0
    assert (by_gpu["0"].sampled_at, by_gpu["0"].evaluated_at) == (990.5, 1000.0)
    assert SAMPLE_LABEL not in by_gpu["0"].labels and "__name__" not in by_gpu["0"].labels
    # No twin: sampled at the evaluation time.
    assert by_gpu["1"].sampled_at == 1000.0
    assert math.isnan(by_gpu["1"].value)


def test_query_errors_name_the_error_type_and_keep_warnings() -> None:
    body = orjson.dumps(
        {
            "status": "error",
            "errorType": "bad_data",
            "error": 'parse error: unexpected "}"',
            "warnings": ["partial response"],
        }
    )
    samples, problem, warnings = parse_body("gpuTemp", 400, body)
    assert samples is None and problem is not None
    assert (problem.query, problem.reason) == ("gpuTemp", "query")
    assert problem.message == 'bad_data: parse error: unexpected "}"'
    assert warnings == ["partial response"]


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (503, b"Service Unavailable", "http"),
        (502, b"<html>bad gateway</html>", "http"),
        (200, b"<html>login</html>", "response"),
        (200, b"[1, 2]", "response"),
        (
            200,
            orjson.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}),
            "query",
        ),
        (
            200,
            orjson.dumps(
                {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}
            ),
            "response",
        ),
    ],
)
def test_bodies_that_are_not_an_instant_vector_are_problems(
    status: int, body: bytes, reason: str
) -> None:
    samples, problem, _ = parse_body("fbFree", status, body)
    assert samples is None
    assert problem is not None and problem.reason == reason, problem


def test_the_wrapped_query_asks_values_and_their_sample_times_per_card() -> None:
    by = card_labels(SETTINGS)
    assert by == ("Hostname", "hostname", "gpu", "UUID")
    q = wrapped_query('DCGM_FI_DEV_GPU_TEMP{cluster="a"}', by)
    assert q.count('DCGM_FI_DEV_GPU_TEMP{cluster="a"}') == 2
    assert 'max by (Hostname, hostname, gpu, UUID) (DCGM_FI_DEV_GPU_TEMP{cluster="a"})' in q
    assert (
        'max by (Hostname, hostname, gpu, UUID) (timestamp(DCGM_FI_DEV_GPU_TEMP{cluster="a"}))' in q
    )
    free = wrapped_query("DCGM_FI_DEV_FB_FREE", by, lowest=True)
    assert free.startswith("label_replace(min by (Hostname, hostname, gpu, UUID)")
    assert "max by (Hostname, hostname, gpu, UUID) (timestamp(" in free
    assert query_name("xid_errors") == "xidErrors"


# -- series -> cards -------------------------------------------------------------------------


def _s(labels: dict[str, str], value: float, sampled: float, evaluated: float = 1000.0) -> Sample:
    return Sample(labels, value, sampled, evaluated)


def test_cards_group_every_metric_and_ages_move_to_our_clock() -> None:
    """Prometheus' clock is 500 s ahead of ours: the age (10 s) is what carries over."""
    samples = {
        "gpu_temp": [_s(GPU, 71.0, 1490.0, 1500.0)],
        "fb_free": [_s(GPU, 80_000.0, 1490.0, 1500.0)],
        "xid_errors": [_s({**GPU, "err_code": "79"}, 79.0, 1490.0, 1500.0)],
    }
    readings, unlabelled = combine(samples, SETTINGS, now=1000.0)
    assert unlabelled == 0
    (r,) = readings
    assert (r.host, r.gpu, r.uuid) == ("node-a", 0, "GPU-aa")
    assert r.at == pytest.approx(990.0)
    assert (r.gpu_temp, r.fb_free_mib, r.xid) == (71.0, 80_000.0, 79)
    assert math.isnan(r.power_w) and math.isnan(r.power_limit_w)


def test_host_label_is_the_first_configured_one_present() -> None:
    both = {"gpu": "3", "hostname": "main-branch", "Hostname": "released"}
    only_lower = {"gpu": "1", "hostname": "node-b"}
    readings, _ = combine(
        {"gpu_temp": [_s(both, 60.0, 1000.0), _s(only_lower, 61.0, 1000.0)]}, SETTINGS, 1000.0
    )
    assert {(r.host, r.gpu) for r in readings} == {("released", 3), ("node-b", 1)}


def test_series_naming_no_card_are_counted_not_guessed() -> None:
    samples = {
        "gpu_temp": [
            _s({"Hostname": "node-a"}, 60.0, 1000.0),  # no index, no UUID
            _s({"gpu": "x", "Hostname": "node-a"}, 60.0, 1000.0),  # index not a number
            _s({"UUID": "GPU-cc"}, 62.0, 1000.0),  # a UUID alone is enough
        ]
    }
    readings, unlabelled = combine(samples, SETTINGS, 1000.0)
    assert unlabelled == 2
    assert [(r.uuid, r.gpu, r.host) for r in readings] == [("GPU-cc", -1, "")]


def test_duplicate_series_take_the_newest_then_the_cautious_value() -> None:
    pod_a, pod_b = {**GPU, "pod": "a"}, {**GPU, "pod": "b"}
    samples = {
        "gpu_temp": [_s(pod_a, 70.0, 995.0), _s(pod_b, 75.0, 995.0), _s(GPU, 90.0, 980.0)],
        "fb_free": [_s(pod_a, 1000.0, 995.0), _s(pod_b, 500.0, 995.0)],
        "fb_used": [_s(pod_a, 1000.0, 995.0), _s(pod_b, 500.0, 995.0)],
    }
    (r,), _ = combine(samples, SETTINGS, 1000.0)
    assert r.gpu_temp == 75.0  # newest time first; the older 90 °C series loses
    assert r.fb_free_mib == 500.0  # free: the lowest
    assert r.fb_used_mib == 1000.0


def test_blank_infinite_and_too_old_values_are_unknown() -> None:
    samples = {
        # dcgm-exporter 2.x printed DCGM's int64 blank for an unsupported field.
        "memory_temp": [_s(GPU, 9223372036854775794.0, 999.0)],
        "power_usage": [_s(GPU, math.inf, 999.0)],
        "gpu_util": [_s(GPU, 40.0, 900.0)],  # 100 s old > staleAfterSeconds: dropped
        "gpu_temp": [_s(GPU, 66.0, 999.0)],
    }
    (r,), _ = combine(samples, SETTINGS, 1000.0)
    assert math.isnan(r.memory_temp) and math.isnan(r.power_w) and math.isnan(r.util_pct)
    assert r.gpu_temp == 66.0
    assert r.at == pytest.approx(999.0)


def test_an_xid_not_read_is_unknown_not_cleared() -> None:
    (r,), _ = combine({"gpu_temp": [_s(GPU, 66.0, 999.0)]}, SETTINGS, 1000.0)
    assert r.xid == XID_UNKNOWN
    (r,), _ = combine({"xid_errors": [_s(GPU, math.nan, 999.0)]}, SETTINGS, 1000.0)
    assert r.xid == XID_UNKNOWN
    (r,), _ = combine({"xid_errors": [_s(GPU, 0.0, 999.0)]}, SETTINGS, 1000.0)
    assert r.xid == NO_XID


def test_a_card_reading_carries_its_newest_sample_time() -> None:
    samples = {"gpu_temp": [_s(GPU, 70.0, 990.0)], "gpu_util": [_s(GPU, 50.0, 960.0)]}
    (r,), _ = combine(samples, SETTINGS, 1000.0)
    assert r.at == pytest.approx(990.0)
    assert r.util_pct == 50.0  # 40 s old, within the limit: kept


# -- HTTP --------------------------------------------------------------------------------------


class FakeApi:
    """Answers /api/v1/query from `answer(query) -> (status, body)`; records requests."""

    def __init__(self, answer: Callable[[str], tuple[int, bytes]]) -> None:
        self.answer = answer
        self.requests: list[tuple[str, str, str]] = []  # method, query, Authorization
        self.delay = 0.0

    async def handle(self, request: web.Request) -> web.Response:
        form = await request.post() if request.method == "POST" else request.query
        query = str(form.get("query", ""))
        self.requests.append((request.method, query, request.headers.get("Authorization", "")))
        if self.delay:
            await asyncio.sleep(self.delay)
        status, body = self.answer(query)
        return web.Response(status=status, body=body, content_type="application/json")


@pytest.fixture
async def api() -> AsyncIterator[tuple[FakeApi, str]]:
    fake = FakeApi(
        lambda q: (200, _ok(_series(GPU, "70", 1000.0), _series(GPU, "999", 1000.0, "time")))
    )
    app = web.Application()
    app.router.add_route("*", "/api/v1/query", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield fake, f"http://127.0.0.1:{port}/"
    await runner.cleanup()


def _settings(url: str, **kw: Any) -> Telemetry:
    return Telemetry(
        prometheus_url=url,
        interval_seconds=5.0,
        stale_after_seconds=60.0,
        query_timeout_seconds=kw.pop("timeout", 2.0),
        **kw,
    )


async def test_one_query_per_configured_metric_and_the_token_reread_every_refresh(
    api: tuple[FakeApi, str], tmp_path: Path
) -> None:
    fake, url = api
    token = tmp_path / "token"
    token.write_text("first\n")
    queries = TelemetryQueries(power_limit="", memory_temp="")  # empty: not asked
    reader = PrometheusReader(
        _settings(url, bearer_token_file=str(token), queries=queries), clock=lambda: 1000.0
    )
    try:
        result = await reader.read()
        assert result.problems == []
        assert len(fake.requests) == 6
        assert {r[2] for r in fake.requests} == {"Bearer first"}
        assert all(r[0] == "GET" for r in fake.requests)
        (reading,) = result.readings
        assert reading.gpu_temp == 70.0 and reading.at == pytest.approx(999.0)
        token.write_text("rotated")
        await reader.read()
        assert {r[2] for r in fake.requests[6:]} == {"Bearer rotated"}
    finally:
        await reader.close()


async def test_a_long_query_goes_as_a_post_form(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    long = "DCGM_FI_DEV_GPU_TEMP{" + ",".join(f'x{i}!="{i}"' for i in range(200)) + "}"
    by = card_labels(SETTINGS)
    assert len(wrapped_query(long, by)) > MAX_GET_QUERY
    reader = PrometheusReader(_settings(url, queries=_only(gpu_temp=long)))
    try:
        result = await reader.read()
    finally:
        await reader.close()
    assert result.problems == []
    assert [(m, q) for m, q, _ in fake.requests] == [("POST", wrapped_query(long, by))]


def _only(**kw: str) -> TelemetryQueries:
    empty = dict.fromkeys(TelemetryQueries.__dataclass_fields__, "")
    return TelemetryQueries(**{**empty, **kw})


async def test_failures_are_problems_and_the_rest_still_read(api: tuple[FakeApi, str]) -> None:
    fake, url = api

    def answer(query: str) -> tuple[int, bytes]:
        if "TYPO" in query:
            return 400, orjson.dumps(
                {"status": "error", "errorType": "bad_data", "error": "parse error"}
            )
        return 200, _ok(_series(GPU, "70", 1000.0))

    fake.answer = answer
    reader = PrometheusReader(
        _settings(url, queries=_only(gpu_temp="DCGM_FI_DEV_GPU_TEMP", fb_free="TYPO{"))
    )
    try:
        result = await reader.read()
    finally:
        await reader.close()
    assert [(p.query, p.reason) for p in result.problems] == [("fbFree", "query")]
    (reading,) = result.readings
    assert reading.gpu_temp == 70.0 and math.isnan(reading.fb_free_mib)


async def test_timeouts_and_refused_connections(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    fake.delay = 1.0
    reader = PrometheusReader(_settings(url, timeout=0.2, queries=_only(gpu_temp="up")))
    try:
        result = await reader.read()
    finally:
        await reader.close()
    assert [(p.query, p.reason) for p in result.problems] == [("gpuTemp", "timeout")]
    assert result.readings == []

    closed = f"http://127.0.0.1:{free_port()}"
    reader = PrometheusReader(_settings(closed, queries=_only(gpu_temp="up")))
    try:
        result = await reader.read()
    finally:
        await reader.close()
    assert [p.reason for p in result.problems] == ["connection"]


async def test_an_unreadable_token_fails_the_refresh_without_asking(
    api: tuple[FakeApi, str], tmp_path: Path
) -> None:
    fake, url = api
    reader = PrometheusReader(_settings(url, bearer_token_file=str(tmp_path / "absent")))
    try:
        result = await reader.read()
    finally:
        await reader.close()
    assert [(p.query, p.reason) for p in result.problems] == [(ALL_QUERIES, "token")]
    assert fake.requests == []


async def test_a_ca_file_that_does_not_load_fails_the_refresh(
    api: tuple[FakeApi, str], tmp_path: Path
) -> None:
    _, url = api
    ca = tmp_path / "ca.crt"
    ca.write_text("not a certificate")
    reader = PrometheusReader(_settings(url, ca_file=str(ca)))
    try:
        result = await reader.read()
    finally:
        await reader.close()
    assert [(p.query, p.reason) for p in result.problems] == [(ALL_QUERIES, "tls")]


def test_no_url_no_reader() -> None:
    with pytest.raises(ValueError, match="prometheusUrl"):
        PrometheusReader(Telemetry())
