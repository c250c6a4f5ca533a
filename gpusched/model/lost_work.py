"""The work a pod loses when it is evicted now: what preemption minimises and the simulator
reports.

A training pod that is evicted restarts from its last checkpoint, so what is lost is its
run since then, times the GPUs it holds:

* `gpusched.io/last-checkpoint-time` (RFC 3339): since then. The pod's owner can write
  it, so it is clamped to [the pod's start, now]: a lie can at most claim "never
  checkpointed", never make the pod look cheaper than a pod that says nothing;
* else `gpusched.io/checkpoint-interval-seconds`: the expected loss, the time since start
  modulo the interval (the run since the last periodic checkpoint);
* else since the pod started (`status.startTime`); a pod not started loses nothing.
"""

from __future__ import annotations

from gpusched.model import keys, quota
from gpusched.model.pod import PodInfo, parse_time


def checkpoint_interval(pod: PodInfo) -> float:
    """`gpusched.io/checkpoint-interval-seconds` in seconds; 0.0 when absent or invalid (the
    pod parser reports an invalid value)."""
    raw = pod.annotations.get(keys.CHECKPOINT_INTERVAL)
    if raw is None:
        return 0.0
    text = str(raw).strip()
    return float(text) if text.isascii() and text.isdigit() and int(text) > 0 else 0.0


def lost_seconds(pod: PodInfo, now: float) -> float:
    """Seconds of the pod's run evicting it at `now` throws away (module docstring)."""
    start = pod.start_time
    if start <= 0.0 or now <= start:
        return 0.0
    ckpt = parse_time(pod.annotations.get(keys.LAST_CHECKPOINT))
    if ckpt > 0.0:
        return now - min(max(ckpt, start), now)
    interval = checkpoint_interval(pod)
    if interval > 0.0:
        return (now - start) % interval
    return now - start


def gpus(pod: PodInfo) -> float:
    """GPUs the pod holds as quota counts them (a share is its fraction of a card)."""
    return quota.usage_of(pod.request)[0] / 1000.0


def lost_gpu_hours(pod: PodInfo, now: float) -> float:
    return gpus(pod) * lost_seconds(pod, now) / 3600.0
