"""Robustness regression check (issue 17): ai-scheduler never leaves more GPU unallocated
than our FGD, on small versions of the five dev traces and of every workload variant.

Each case is a trace at 1/8 scale (``small8``, sim/variants.py ``small_scale``: every node
shape and each pod shape's share kept, about 160 nodes and 1,300 arrivals; a policy run
takes about 1.5 s instead of 12), built last so the stress step saw the whole trace
(``spec33+small8``). On each arrival seed the FGD protocol runs both policies
(fgd_protocol.run_seed on the same arrivals); the case passes if the median over the seeds
of ai-scheduler's unallocated GPU % at 100 % arrived demand is at most FGD's median plus
:data:`TOLERANCE`. The assertion message prints every seed's numbers.

ai-scheduler is the built-in profile, so the test checks what the daemon ships.
``GPUSCHED_REGRESSION_CONFIG`` (a configuration file, as ``simulate --config``) measures
its ``ai-scheduler`` profile (or its only one) instead: how to check a candidate default
before switching it. Nothing is skipped: a missing trace fails with the path it was looked
for at (``GPUSCHED_OPENB_DIR``, else ``../shared/traces/openb``).

Why three seeds and no tolerance (docs/workload-variants.md, "The robustness check", has
the table): the module must stay under 3 minutes on a 2-core machine (measured: 112-116 s
for 90 policy runs), which affords three seeds. Every case is deterministic (same code,
same numbers), and the issue's rule is "never worse than FGD", so the check holds it to
that. Measured at small8 over seeds 42-54, the 3-seed median difference (ai-scheduler -
FGD) varies by 0.20-0.85 points per case: a change that only reshuffles placements can
flip a near tie (scarce-G2 at -0.12 on these seeds, +0.22 over 13 seeds; share20 at
-0.14). Such a failure is the prompt to run the full-size table (make variants-table)
before deciding, not noise to widen the band for. The old default (modelWeight 0) fails
on spec33 (+3.21) and spec50 (+1.11); modelWeight 30 passes every case.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from gpusched.config import load_config
from gpusched.config.profile import Profile
from gpusched.framework.registry import Registry
from gpusched.plugins import default_registry
from gpusched.sim.fgd_protocol import Trace, load_trace, run_seed, variant_trace
from gpusched.sim.fgd_workload import build_workload
from gpusched.sim.variants import DEV_TRACES, STRESS, base_of
from tests.traces import openb_dir

SMALL = "small8"
SEEDS = (42, 43, 44)
TOLERANCE = 0.0  # points of unallocated GPU %; see the module docstring
AT = 100  # % of arrived demand
CASES = [*DEV_TRACES, *STRESS]


@pytest.fixture(scope="module")
def registry() -> Registry:
    return default_registry()


@pytest.fixture(scope="module")
def ai_profile(registry: Registry) -> Profile | None:
    """None: the built-in ai-scheduler profile (run_seed's own); else the file's."""
    path = os.environ.get("GPUSCHED_REGRESSION_CONFIG")
    if not path:
        return None
    profiles = load_config(Path(path), registry).profiles
    named = [p for p in profiles if p.scheduler_name == "ai-scheduler"]
    assert named or len(profiles) == 1, f"{path}: no ai-scheduler profile and not exactly one"
    return (named or profiles)[0]


def small_trace(case: str) -> Trace:
    directory = openb_dir()
    if case in DEV_TRACES:
        pods_file, variant = f"openb_pod_list_{case}.csv", SMALL
    else:
        pods_file, variant = base_of(case), f"{case}+{SMALL}"
    assert (directory / pods_file).is_file(), (
        f"openb trace not found at {directory} (set GPUSCHED_OPENB_DIR): the robustness"
        " check needs the five dev pod lists"
    )
    return variant_trace(load_trace(directory, pods_file), variant, trace_dir=directory)


@pytest.mark.parametrize("case", CASES)
def test_ai_scheduler_not_worse_than_fgd(
    case: str, registry: Registry, ai_profile: Profile | None
) -> None:
    trace = small_trace(case)
    fgd: list[float] = []
    ai: list[float] = []
    for seed in SEEDS:
        workload = build_workload(trace.pods, trace.nodes, seed)
        for policy, out, profile in (("FGD", fgd, None), ("ai-scheduler", ai, ai_profile)):
            run = run_seed(trace, policy, seed, registry, workload=workload, profile=profile)
            assert run.errors == 0, f"{trace.name} {policy} seed {seed}: {run.errors} errors"
            out.append(round(100.0 - float(run.curve()[AT]), 2))
    fgd_med, ai_med = statistics.median(fgd), statistics.median(ai)
    which = "built-in" if ai_profile is None else os.environ["GPUSCHED_REGRESSION_CONFIG"]
    # Shown with -rP: every case's margin, not only the failures'.
    print(
        f"{trace.name}: median ai-scheduler {ai_med:.2f} - FGD {fgd_med:.2f}"
        f" = {ai_med - fgd_med:+.2f} (ai-scheduler {ai}, FGD {fgd})"
    )
    assert ai_med <= fgd_med + TOLERANCE, (
        f"{trace.name}: ai-scheduler ({which} profile) leaves more GPU unallocated than FGD at"
        f" {AT}% arrived demand: median {ai_med:.2f} vs {fgd_med:.2f}"
        f" (+{ai_med - fgd_med:.2f} points, tolerance {TOLERANCE}); seeds {list(SEEDS)}:"
        f" ai-scheduler {ai}, FGD {fgd}"
    )
