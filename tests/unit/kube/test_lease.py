"""The leader elector against an in-memory Lease API with a fake clock: client-go's
tryAcquireOrRenew rules, the renew deadline, release on stop. No real time passes: every
wait goes through the injected sleep, which only advances the fake clock."""

from __future__ import annotations

import asyncio
import io

import orjson
import pytest

from gpusched.kube.client import ApiError
from gpusched.kube.lease import LeaderElector, default_identity
from tests.fakes import PATH, FakeClock, FakeLeases, elector, other_holder, renew_as_holder, until

# A guard against a hang, not a synchronisation: the fake sleep makes every run instant.
GUARD = 5.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api() -> FakeLeases:
    return FakeLeases()


async def test_acquires_an_absent_lease(api: FakeLeases, clock: FakeClock) -> None:
    le = elector(api, clock)
    assert await le.try_acquire_or_renew()
    assert api.calls == ["get", "create"]
    spec = api.spec
    assert spec["holderIdentity"] == "me_1"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == spec["renewTime"] == "2030-01-01T00:01:40.000000Z"
    assert le.is_leader


async def test_renewal_keeps_acquire_time_and_transitions(
    api: FakeLeases, clock: FakeClock
) -> None:
    le = elector(api, clock)
    assert await le.try_acquire_or_renew()
    acquired = api.spec["acquireTime"]
    clock.t += 2
    api.calls.clear()
    assert await le.try_acquire_or_renew()
    assert api.calls == ["update"]  # the fast path: no GET per renewal
    assert api.spec["acquireTime"] == acquired
    assert api.spec["renewTime"] != acquired
    assert api.spec["leaseTransitions"] == 0


async def test_does_not_steal_a_live_lease(api: FakeLeases, clock: FakeClock) -> None:
    api.put(other_holder(clock))
    le = elector(api, clock)
    assert not await le.try_acquire_or_renew()
    assert le.holder == "other_1" and not le.is_leader
    # The holder renews: each change restarts the lease duration from when we saw it.
    for _ in range(10):
        clock.t += 10
        api.put({**api.spec, "renewTime": f"renewed at {clock.t}"})
        assert not await le.try_acquire_or_renew()
    assert api.spec["holderIdentity"] == "other_1"


async def test_expiry_is_judged_by_our_observation_not_the_holders_clock(
    api: FakeLeases, clock: FakeClock
) -> None:
    """A renewTime an hour in the past (the holder's clock is behind ours) does not make the
    Lease expired: only leaseDuration without a change we saw does."""
    api.put({**other_holder(clock), "renewTime": "2029-12-31T23:00:00.000000Z"})
    le = elector(api, clock)
    assert not await le.try_acquire_or_renew()
    clock.t += 14.9
    assert not await le.try_acquire_or_renew()


async def test_takes_an_expired_lease(api: FakeLeases, clock: FakeClock) -> None:
    api.put(other_holder(clock, transitions=3))
    le = elector(api, clock)
    assert not await le.try_acquire_or_renew()  # first sight starts the clock
    clock.t += 15.1  # the holder wrote nothing for a whole leaseDuration
    assert await le.try_acquire_or_renew()
    assert api.spec["holderIdentity"] == "me_1"
    assert api.spec["leaseTransitions"] == 4
    assert api.spec["acquireTime"] == api.spec["renewTime"]
    # Never released: the old holder may have hung mid-write, so the daemon waits.
    assert le.took_over_from == "other_1"


async def test_takes_a_released_lease_at_once(api: FakeLeases, clock: FakeClock) -> None:
    api.put({**other_holder(clock), "holderIdentity": "", "leaseDurationSeconds": 1})
    le = elector(api, clock)
    assert await le.try_acquire_or_renew()
    assert api.spec["holderIdentity"] == "me_1"
    assert api.spec["leaseTransitions"] == 4
    assert le.took_over_from == ""  # released: nothing of the old holder's can be in flight


async def test_a_lease_edited_to_name_a_standby_is_a_takeover_it_must_wait_out(
    api: FakeLeases, clock: FakeClock
) -> None:
    """Someone (kubectl, a script) writes the standby's identity into the Lease while the
    leader still runs: the standby takes it, but that was no release, so the old leader's
    last Bindings may still be in flight and the daemon must wait before binding (it did
    not: the record named us, so it counted as ours and the wait was skipped)."""
    api.put(other_holder(clock, transitions=3))
    le = elector(api, clock)
    assert not await le.try_acquire_or_renew()  # a standby: other_1 leads
    api.put({**api.spec, "holderIdentity": "me_1"})  # the edit
    clock.t += 2
    assert await le.try_acquire_or_renew()
    assert api.spec["holderIdentity"] == "me_1"
    assert le.took_over_from == "other_1"


async def test_a_lease_naming_us_at_first_sight_is_a_takeover_from_an_unknown_holder(
    api: FakeLeases, clock: FakeClock
) -> None:
    """Our identity has a random suffix, so only someone else can have written it there
    before we ever wrote the Lease: whoever held it before is unknown and may be writing."""
    api.put(other_holder(clock, holder="me_1"))
    le = elector(api, clock)
    assert await le.try_acquire_or_renew()
    assert le.took_over_from != ""


async def test_the_fence_holds_only_while_the_last_renewal_is_fresh(
    api: FakeLeases, clock: FakeClock
) -> None:
    le = elector(api, clock)
    assert le.fence() == "this instance does not hold the leader Lease"
    task = asyncio.create_task(le.run())
    await asyncio.wait_for(le.leading.wait(), GUARD)
    assert le.fence() is None
    # The renewals stop landing (the API is unreachable): before renewDeadline the writes
    # still go; from renewDeadline on they stop, though `leading` is not yet cleared.
    api.fail = ApiError("PUT", PATH, 503, "{}")
    started = le.last_renew
    clock.t = started + 9.9
    assert le.fence() is None
    clock.t = started + 10.0
    assert le.leading.is_set()
    assert le.fence() == "the leader Lease was last renewed 10.0s ago (renewDeadline 10.0s)"
    le.stop()
    await asyncio.wait_for(task, GUARD)


async def test_a_conflict_loses_the_race_and_the_next_attempt_re_reads(
    api: FakeLeases, clock: FakeClock
) -> None:
    """Two standbys see the same expired Lease; the one whose update lands second gets 409
    and, reading again, finds a live leader."""
    api.put(other_holder(clock))
    le = elector(api, clock)
    assert not await le.try_acquire_or_renew()
    clock.t += 16
    api.before_update = lambda: api.put(other_holder(clock, "rival_1"))
    assert not await le.try_acquire_or_renew()
    assert api.spec["holderIdentity"] == "rival_1"
    assert not await le.try_acquire_or_renew()
    assert le.holder == "rival_1"
    assert api.calls[-1] == "get"  # re-read, and no write over the rival


async def test_a_conflict_on_renewal_falls_back_to_reading(
    api: FakeLeases, clock: FakeClock
) -> None:
    """The leader's fast-path update is stale (someone else touched the object, keeping us
    as holder): it reads the Lease again and renews in the same attempt."""
    le = elector(api, clock)
    assert await le.try_acquire_or_renew()
    api.put(api.spec)  # e.g. `kubectl annotate`: a new resourceVersion, same holder
    api.calls.clear()
    clock.t += 2
    assert await le.try_acquire_or_renew()
    assert api.calls == ["update", "get", "update"]
    assert api.spec["holderIdentity"] == "me_1"


async def test_a_lost_create_race_is_not_leadership(api: FakeLeases, clock: FakeClock) -> None:
    le = elector(api, clock)
    real_get = api.get

    async def get_then_rival_creates() -> object:
        got = await real_get()
        api.put(other_holder(clock, "rival_1"))
        return got

    api.get = get_then_rival_creates  # type: ignore[assignment,method-assign]
    assert not await le.try_acquire_or_renew()
    assert not le.is_leader


async def test_run_leads_renews_and_releases_on_stop(api: FakeLeases, clock: FakeClock) -> None:
    changes: list[bool] = []
    stream = io.StringIO()
    le = elector(api, clock, on_change=changes.append, log=stream)
    run = asyncio.create_task(le.run())
    await asyncio.wait_for(le.leading.wait(), GUARD)
    # Several renewals, every retryPeriod.
    await asyncio.wait_for(until(lambda: api.rv >= 4, api.changed), GUARD)
    assert 2.0 in clock.sleeps
    transitions = api.spec["leaseTransitions"]
    le.stop()
    await asyncio.wait_for(run, GUARD)
    assert api.spec["holderIdentity"] == ""
    assert api.spec["leaseDurationSeconds"] == 1
    assert api.spec["leaseTransitions"] == transitions
    assert changes == [True, False]
    assert not le.lost.is_set()
    events = [orjson.loads(line)["event"] for line in stream.getvalue().splitlines()]
    assert "leader elected" in events and "leader lease released" in events
    # A standby takes the released Lease on its first attempt, without waiting for expiry.
    standby = elector(api, clock, "standby_1")
    assert await standby.try_acquire_or_renew()
    assert api.spec["leaseTransitions"] == transitions + 1


async def test_renew_failing_past_the_deadline_loses_leadership(
    api: FakeLeases, clock: FakeClock
) -> None:
    changes: list[bool] = []
    stream = io.StringIO()
    le = elector(api, clock, on_change=changes.append, log=stream)
    run = asyncio.create_task(le.run())
    await asyncio.wait_for(le.leading.wait(), GUARD)
    api.fail = ApiError("PUT", PATH, 500, "etcd unavailable")
    await asyncio.wait_for(run, GUARD)
    assert le.lost.is_set() and not le.leading.is_set()
    assert changes == [True, False]
    since = clock.t - le.last_renew
    # Given up after renewDeadline, and before a standby could see the Lease expire.
    assert 10.0 <= since < 15.0
    lost = [
        rec
        for rec in map(orjson.loads, stream.getvalue().splitlines())
        if rec["event"] == "leader lost"
    ]
    assert lost and lost[0]["identity"] == "me_1" and "renewDeadline" in lost[0]["reason"]


async def test_a_lease_taken_by_another_is_lost_at_once(api: FakeLeases, clock: FakeClock) -> None:
    le = elector(api, clock)
    run = asyncio.create_task(le.run())
    await asyncio.wait_for(le.leading.wait(), GUARD)
    renewed = clock.t
    api.put(other_holder(clock, "usurper_1"))
    await asyncio.wait_for(run, GUARD)
    assert le.lost.is_set()
    assert clock.t - renewed < 10.0  # not only at the renew deadline
    assert api.spec["holderIdentity"] == "usurper_1"  # and no release over theirs


async def test_stop_while_standby_leaves_the_lease_alone(api: FakeLeases, clock: FakeClock) -> None:
    api.put(other_holder(clock))
    le = elector(api, clock)
    run = asyncio.create_task(le.run())
    await asyncio.wait_for(until(lambda: "get" in api.calls, api.changed), GUARD)
    le.stop()
    await asyncio.wait_for(run, GUARD)
    assert api.spec["holderIdentity"] == "other_1"
    assert api.calls.count("update") == 0
    assert not le.lost.is_set()


async def test_standby_retries_with_jitter_until_the_holder_releases(
    api: FakeLeases, clock: FakeClock
) -> None:
    api.put(other_holder(clock))
    le = LeaderElector(
        api,
        "me_1",
        lease_duration=15,
        renew_deadline=10.0,
        retry_period=2.0,
        log=elector(api, clock).log,
        clock=clock,
        sleep=clock.sleep,
        wall=clock.wall,
        jitter=lambda: 0.5,
    )
    api.renewer = renew_as_holder(api, clock)
    run = asyncio.create_task(le.run())
    await asyncio.wait_for(until(lambda: len(clock.sleeps) >= 10, clock.changed), GUARD)
    assert not le.leading.is_set()
    assert clock.sleeps[0] == pytest.approx(2.0 * (1 + 1.2 * 0.5))
    api.renewer = None
    api.put({**api.spec, "holderIdentity": "", "leaseDurationSeconds": 1})
    await asyncio.wait_for(le.leading.wait(), GUARD)
    le.stop()
    await asyncio.wait_for(run, GUARD)


async def test_forbidden_is_logged_with_what_to_grant(api: FakeLeases, clock: FakeClock) -> None:
    stream = io.StringIO()
    le = elector(api, clock, log=stream)
    api.fail = ApiError("GET", PATH, 403, '{"kind":"Status","reason":"Forbidden"}')
    run = asyncio.create_task(le.run())
    await asyncio.wait_for(until(lambda: len(clock.sleeps) >= 2, clock.changed), GUARD)
    le.stop()
    await asyncio.wait_for(run, GUARD)
    assert "manifests/rbac/gpusched.yaml" in stream.getvalue()


def test_bad_timings_are_refused(api: FakeLeases, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="retryPeriod < renewDeadline < leaseDuration"):
        LeaderElector(
            api,
            "x",
            lease_duration=10,
            renew_deadline=10.0,
            retry_period=2.0,
            log=elector(api, clock).log,
        )


def test_identity_is_the_pod_name_plus_a_random_suffix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "gpusched-7d9f-abcde")
    a, b = default_identity(), default_identity()
    assert a.startswith("gpusched-7d9f-abcde_") and b.startswith("gpusched-7d9f-abcde_")
    assert a != b
