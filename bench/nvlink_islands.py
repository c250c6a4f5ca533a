"""NVLinkTopology on a fleet with NVLink islands: do NVLink-required 4-GPU pods placed
later succeed more often with the score on?

    .venv/bin/python bench/nvlink_islands.py [--seeds 1-5] [--weights 0,0.1,0.25,0.5,1]

The simulator's fleet (`gpusched/sim/generator.py`), V100 nodes only: 8 cards in two NVLink
islands of four (`--nodes` nodes). Through the ai-scheduler profile with NVLinkTopology at
each weight (0: disabled):

1. fill: whole-card pods of 1, 2 or 3 cards (no NVLink annotation; 2- and 3-card pods are the
   ones the score steers) arrive in a seeded order until `--fill` of the cards are asked for;
2. churn: a seeded `--churn` share of the placed pods leave (jobs finish at random);
3. refill: more of the same pods, to `--fill` again;
4. then `gpusched.io/nvlink: required` 4-card pods arrive one after the other until
   `--nvlink-pods` were submitted; printed: how many were placed, the cards of fill pods
   that found no node (per 100 pods submitted: whether keeping islands whole costs the
   other pods room), and the mean cost of an attempt in steps 1-3 (µs per pod).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from gpusched.config.defaults import builtin_document
from gpusched.config.load import config_from_dict
from gpusched.core.schedule_one import Result
from gpusched.model.pod import NVLink, PodInfo, PodRequest
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation
from gpusched.sim.generator import generate_fleet

GiB = 1024**3


def profile_doc(weight: float) -> dict[str, Any]:
    doc = builtin_document("ai-scheduler")
    plugins = doc["profiles"][0].setdefault("plugins", {})
    if weight <= 0:
        plugins["preScore"] = {"disabled": [{"name": "NVLinkTopology"}]}
        plugins["score"] = {"disabled": [{"name": "NVLinkTopology"}]}
    else:
        plugins["score"] = {"enabled": [{"name": "NVLinkTopology", "weight": weight}]}
    return doc


def pod(i: int, cards: int, nvlink: NVLink = NVLink.NONE) -> PodInfo:
    return PodInfo(
        uid=f"uid-{i}",
        namespace="bench",
        name=f"p-{i:05d}",
        request=PodRequest(cpu_milli=1000, memory_bytes=4 * GiB, gpu_cards=cards, nvlink=nvlink),
        scheduler_name="ai-scheduler",
        created=float(i),
    )


def run(seed: int, weight: float, args: argparse.Namespace) -> tuple[int, float, float]:
    reg = default_registry()
    profile = config_from_dict(profile_doc(weight), reg).profiles[0]
    fleet = generate_fleet(
        seed=seed, racks=max(1, args.nodes // 8), nodes_per_rack=8, mix=(0.0, 1.0, 0.0, 0.0)
    )
    sim = Simulation(fleet.nodes, profile, reg, seed=seed)
    rng = np.random.default_rng(seed)
    capacity = sum(n.gpu_count for n in fleet.nodes)
    placed: list[PodInfo] = []
    asked = 0
    i = 0
    spent = 0.0
    attempts = 0
    refused = 0  # cards of the fill pods that found no node

    def fill() -> None:
        nonlocal asked, i, spent, attempts, refused
        while asked < args.fill * capacity:
            k = int(rng.choice([1, 2, 3], p=[0.4, 0.35, 0.25]))
            p = pod(i, k)
            i += 1
            t0 = time.perf_counter()
            d = sim.submit(p)
            spent += time.perf_counter() - t0
            attempts += 1
            if d.result is Result.SCHEDULED:
                placed.append(p)
                asked += k
            else:
                sim.withdraw(p.uid)
                refused += k
                asked += k  # offered load counts whether or not it fitted

    fill()
    leaving = rng.random(len(placed)) < args.churn
    for p, go in zip(list(placed), leaving, strict=True):
        if go:
            sim.delete(p.uid)
            placed.remove(p)
            asked -= p.request.gpu_cards
    fill()
    ok = 0
    for _ in range(args.nvlink_pods):
        p = pod(i, 4, NVLink.REQUIRED)
        i += 1
        d = sim.submit(p)
        if d.result is Result.SCHEDULED:
            ok += 1
        else:
            sim.withdraw(p.uid)
    return ok, 1e6 * spent / max(1, attempts), 100.0 * refused / max(1, attempts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--weights", default="0,0.1,0.25,0.5,1")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--fill", type=float, default=0.75)
    ap.add_argument("--churn", type=float, default=0.3)
    ap.add_argument("--nvlink-pods", type=int, default=64)
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    for w in (float(x) for x in args.weights.split(",")):
        got = [run(s, w, args) for s in seeds]
        placed = [g[0] for g in got]
        cost = [g[1] for g in got]
        refused = [g[2] for g in got]
        print(
            f"weight {w:<5} nvlink-required 4-GPU pods placed {np.mean(placed):6.2f}"
            f" ± {np.std(placed):.2f} of {args.nvlink_pods} (per seed {placed});"
            f" fill cards refused per 100 pods {np.mean(refused):.2f};"
            f" {np.mean(cost):.0f} µs/pod while filling"
        )


if __name__ == "__main__":
    main()
