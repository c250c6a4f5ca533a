"""The `gpusched` command: simulate | variants | run | explain | agent | check-config."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

if TYPE_CHECKING:
    from gpusched.framework.registry import Registry

DEMO_PROFILES = ("ai-scheduler", "least-allocated", "most-allocated")
DESCRIPTION = (
    "A GPU-aware secondary scheduler for Kubernetes: it places the pods whose"
    " spec.schedulerName is one of its profiles (ai-scheduler by default). Every command"
    " has its own --help."
)


def _fail(command: str, message: str) -> int:
    print(f"gpusched {command}: {message}", file=sys.stderr)
    return 2


def _trace_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with --trace-dir and the output paths, found before a run that may take
    minutes (a missing output directory used to fail only after it, with a traceback)."""
    if args.trace_dir is not None and not Path(args.trace_dir).is_dir():
        what = "does not exist" if not Path(args.trace_dir).exists() else "is not a directory"
        return (
            f"--trace-dir {args.trace_dir} {what}; pass the directory of the openb CSV files"
            " (e.g. ../shared/traces/openb)"
        )
    for flag in ("json_out", "curves_out", "plot_out"):
        value = getattr(args, flag)
        if value is None:
            continue
        parent = Path(value).parent
        if not parent.is_dir():
            return (
                f"--{flag.replace('_', '-')} {value}: directory {parent} does not exist;"
                " create it or write elsewhere"
            )
    return None


def _cmd_simulate(args: argparse.Namespace) -> int:
    if args.protocol == "demo":
        return _cmd_simulate_demo(args)
    from gpusched.config import ConfigError
    from gpusched.sim.openb import TraceFormatError
    from gpusched.sim.variants import VariantError, resolve

    problem = _trace_problem(args)
    if problem is not None:
        return _fail("simulate", problem)
    if args.variant is not None:
        if args.protocol != "fgd":
            return _fail("simulate", "--variant works with --protocol fgd only")
        try:
            resolve(args.variant)  # a bad name fails here, before the trace is read
        except VariantError as exc:
            return _fail("simulate", f"--variant: {exc}")
    try:
        if args.protocol == "fgd":
            return _cmd_simulate_fgd(args)
        if args.tenants:
            from gpusched.sim.tenancy_report import tenancy_main

            return tenancy_main(args)
        from gpusched.sim.replay_report import replay_main

        return replay_main(args)
    except (OSError, TraceFormatError, ConfigError, VariantError) as exc:
        return _fail("simulate", _input_problem(exc, "--trace-dir and --pods"))


def _input_problem(exc: Exception, inputs: str) -> str:
    """What to tell the user when reading a trace, a variant or a configuration failed (a
    clear line, never a traceback); `inputs` names the options to check for a missing file."""
    from gpusched.config import ConfigError
    from gpusched.sim.openb import TraceFormatError
    from gpusched.sim.variants import VariantError

    if isinstance(exc, FileNotFoundError):  # openb.py: "trace file not found: DIR/FILE"
        return f"{exc}; check {inputs}"
    if isinstance(exc, TraceFormatError):
        return f"malformed trace: {exc}; fix the file or pass another --pods"
    if isinstance(exc, ConfigError):
        return f"--config: {exc}"
    if isinstance(exc, VariantError):  # e.g. drop-<MODEL> of a model the nodes do not have
        return f"variant: {exc}"
    if isinstance(exc, OSError):
        return f"{exc.filename or ''}: {exc.strerror or exc}"
    raise exc


def _cmd_simulate_fgd(args: argparse.Namespace) -> int:
    """The FGD paper's protocol on an openb trace (gpusched/sim/fgd_protocol.py)."""
    from gpusched.config import load_config
    from gpusched.plugins import default_registry
    from gpusched.sim import fgd_report
    from gpusched.sim.fgd_protocol import (
        POLICIES,
        PolicyResult,
        load_trace,
        parse_policies,
        parse_seeds,
        run_seed,
        variant_trace,
    )
    from gpusched.sim.fgd_workload import build_workload

    console = Console(width=max(120, Console().width))
    if args.trace_dir is None:
        console.print("--protocol fgd needs --trace-dir (e.g. ../shared/traces/openb)")
        return 2
    trace = load_trace(args.trace_dir, args.pods, args.nodes)
    if args.variant is not None:
        trace = variant_trace(trace, args.variant, args.variant_seed, args.trace_dir)
    seeds = parse_seeds(args.seeds or "42-51")
    registry = default_registry()
    # Profiles of a configuration file are measured as policies named by schedulerName.
    own = (
        {p.scheduler_name: p for p in load_config(Path(args.config), registry).profiles}
        if (args.config)
        else {}
    )
    if args.policies:
        names = [n.strip() for n in args.policies.split(",") if n.strip()]
        try:
            policies = [n if n in own else parse_policies(n)[0] for n in names]
        except KeyError as exc:
            extra = f", or a --config profile: {', '.join(own)}" if own else ""
            return _fail("simulate", f"--policies: {exc.args[0]}{extra}")
    else:
        policies = [*POLICIES, *own]
    ref_dir = args.reference_dir or Path(args.trace_dir).resolve().parent.parent / "reference"
    published = fgd_report.load_published(ref_dir, trace.name)
    console.print(
        f"trace {trace.name}: {sum(1 for n in trace.nodes if n.gpu)} GPU nodes,"
        f" {len(trace.pods)} pods; seeds {seeds[0]}..{seeds[-1]}; tie-break {args.tie_break}"
        + (f"; DRA claims (card memory: {args.dra})" if args.dra else "")
    )
    workloads = {s: build_workload(trace.pods, trace.nodes, s) for s in seeds}
    results: list[PolicyResult] = []
    errors = 0
    for name in policies:
        runs = []
        for s in seeds:
            run = run_seed(
                trace,
                name,
                s,
                registry,
                workload=workloads[s],
                keep_placements=args.placements_out is not None,
                tie_break=args.tie_break,
                profile=own.get(name),
                owners=args.owners,
                dra=args.dra,
                tenants=args.tenants,
            )
            errors += run.errors
            if args.placements_out is not None:
                fgd_report.write_placements(args.placements_out, run)
            spread = f"  max replicas/node {run.max_per_node:.3f}" if args.owners != "none" else ""
            if args.tenants:
                spread += f"  tenant concentration {run.concentration:.3f}"
            console.print(
                f"  {name:<14} seed {s}: unallocated at 100% {100 - run.curve()[100]:5.2f}%"
                f"  {run.seconds:5.2f} s  {run.us_per_pod:4.0f} µs/pod{spread}"
            )
            runs.append(run)
        results.append(PolicyResult(name, runs))
    console.print(fgd_report.table(trace.name, results, published))
    if args.json_out:
        fgd_report.write_json(args.json_out, fgd_report.to_json(trace.name, results, published))
    if args.curves_out:
        fgd_report.write_curves(args.curves_out, trace.name, results)
    if args.plot_out:
        fgd_report.write_plot(args.plot_out, trace.name, results)
    return 0 if errors == 0 else 1


def _cmd_variants_list(args: argparse.Namespace) -> int:
    from gpusched.sim.variants import VARIANTS

    width = max(len(n) for n in VARIANTS)
    for v in VARIANTS.values():
        base = v.base.removeprefix("openb_pod_list_").removesuffix(".csv")
        print(f"{v.name:<{width}}  (base {base})  {v.description}")
    print(
        f"{'drop-<MODEL>':<{width}}  any GPU model of the node list; scarce-<MODEL> likewise;"
        " A+B applies A then B"
    )
    print(
        f"{'small<K>':<{width}}  a 1/K scale model (small = small8) for fast checks; put it"
        " last: spec33+small8"
    )
    return 0


def _git_checkout_of(path: Path) -> Path | None:
    """The git checkout (a directory holding .git, a worktree's file included) containing
    `path`, if any: trace data must never land in one (it is not ours to commit)."""
    for parent in (path, *path.parents):
        if (parent / ".git").exists():
            return parent
    return None


def _cmd_variants_write(args: argparse.Namespace) -> int:
    from gpusched.sim.openb import TraceFormatError, load_nodes, load_pods, write_nodes, write_pods
    from gpusched.sim.variants import VARIANTS, VariantError, apply_variant, base_of, variant_label

    out = Path(args.out).resolve()
    checkout = _git_checkout_of(out)
    if checkout is not None:
        return _fail(
            "variants write",
            f"--out {args.out} is inside the git checkout {checkout}; the trace must never be"
            " copied into a repository: write outside it (e.g. /tmp/openb-variants)",
        )
    if not Path(args.trace_dir).is_dir():
        return _fail("variants write", f"--trace-dir {args.trace_dir} is not a directory")
    names = args.names or list(VARIANTS)
    try:
        bases = {n: args.pods or base_of(n) for n in names}
        out.mkdir(parents=True, exist_ok=True)
        nodes = load_nodes(args.trace_dir, args.nodes)
        for name in names:
            base = bases[name]
            pods, vnodes = apply_variant(
                name,
                load_pods(args.trace_dir, base),
                nodes,
                args.variant_seed,
                trace_dir=args.trace_dir,
            )
            stem = Path(base).stem.removeprefix("openb_pod_list_")
            label = f"{stem}+{variant_label(name, args.variant_seed)}"
            pod_file = write_pods(out / f"openb_pod_list_{label}.csv", pods)
            node_file = write_nodes(out / f"openb_node_list_{label}.csv", vnodes)
            print(
                f"{label}: {pod_file.name} ({len(pods)} pods),"
                f" {node_file.name} ({len(vnodes)} nodes)"
            )
    except (OSError, TraceFormatError, VariantError) as exc:
        return _fail("variants write", _input_problem(exc, "--trace-dir, --pods and --nodes"))
    return 0


def _cmd_simulate_demo(args: argparse.Namespace) -> int:
    from gpusched.config import builtin_profile
    from gpusched.plugins import default_registry
    from gpusched.sim.demo import LEGEND, DemoResult, run_profile, verdict
    from gpusched.sim.generator import generate_fleet, generate_gang_workload, generate_workload

    # Wide enough that the table never wraps its labels, also when piped.
    console = Console(width=max(100, Console().width))
    registry = default_registry()
    fleet = generate_fleet(seed=args.seed, racks=args.racks, nodes_per_rack=args.nodes_per_rack)
    gen = generate_gang_workload if args.gangs else generate_workload
    pods = gen(fleet, seed=args.seed, load=args.load)
    console.print(
        f"fleet: {len(fleet.nodes)} nodes, {fleet.gpu_milli_capacity // 1000} GPUs"
        f" in {args.racks} racks;"
        f" workload: {len(pods)} pods, GPU demand {args.load:.0%} of capacity (seed {args.seed})"
    )
    # The first run in a checkout compiles the numba kernels (about 20 s on 2 cores, cached
    # in __pycache__ afterwards) before the first pod moves the bar: say so.
    console.print(
        "compiling the scheduling kernels on first use (about 20 s the first time in a"
        " checkout, cached afterwards)..."
    )
    results: list[DemoResult] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as progress:
        for name in args.profiles:
            profile = builtin_profile(name, registry)
            task = progress.add_task(name, total=len(pods))

            def advance(i: int, task: TaskID = task) -> None:
                progress.update(task, completed=i)

            results.append(
                run_profile(
                    fleet,
                    pods,
                    profile,
                    registry,
                    seed=args.seed,
                    progress=advance,
                )
            )
            progress.update(task, completed=len(pods))
    console.print(_table(results))
    for line in verdict(results):
        console.print(f"Verdict: {line}.")
    console.print("Legend:")
    for line in LEGEND:
        console.print(f"  {line}")
    return 0 if all(r.errors == 0 for r in results) else 1


def _table(results: Sequence[object]) -> Table:
    from gpusched.sim.demo import DemoResult

    rs = [r for r in results if isinstance(r, DemoResult)]
    table = Table(title="ai-scheduler vs kube-scheduler-like scoring (same fleet, same arrivals)")
    table.add_column("metric")
    for r in rs:
        table.add_column(r.profile, justify="right")

    def row(label: str, fmt: object) -> None:
        table.add_row(label, *[fmt(r) if callable(fmt) else str(fmt) for r in rs])

    row("GPU allocation rate", lambda r: f"{r.gpu_allocation_pct:.1f}%")
    for kind, label in (("whole", "whole-card"), ("shared", "shared"), ("cpu", "CPU-only")):
        row(
            f"{label} pods left unplaced",
            lambda r, k=kind: f"{r.unplaced.get(k, 0)} / {r.submitted.get(k, 0)}",
        )
    row(
        "8-card whole-node job success",
        lambda r: f"{r.whole_node_success_pct:.1f}% ({r.whole_node_jobs_ok}/{r.whole_node_jobs})",
    )
    row("multi-pod jobs: pods in top rack (mean)", lambda r: f"{r.same_rack_pct:.1f}%")
    row("hottest card at the end (simulated heat)", lambda r: f"{r.hottest_used_c:.1f} °C")
    row("node-hours above the 82 °C red line", lambda r: f"{r.red_line_node_h:.2f}")
    row("throttled GPU-hours", lambda r: f"{r.throttled_gpu_h:.2f}")
    row("scheduling time per pod", lambda r: f"{r.us_per_pod:.0f} µs")
    return table


def _cmd_run(args: argparse.Namespace) -> int:
    from gpusched.daemon.main import RunArgs, run_main

    return run_main(
        RunArgs(
            config=args.config,
            kubeconfig=args.kubeconfig,
            metrics_port=args.metrics_port,
            log_level=args.log_level,
            leader_elect=args.leader_elect,
            config_poll_seconds=args.config_poll_seconds,
            config_map=args.config_map or "",
            gpu_map=args.gpu_map,
            explain_endpoint=args.explain_endpoint,
        )
    )


def _cmd_explain(args: argparse.Namespace) -> int:
    from gpusched.daemon.explain_cli import ExplainArgs, explain_main

    return explain_main(
        ExplainArgs(
            target=args.target,
            namespace=args.namespace or "",
            kubeconfig=args.kubeconfig,
            config=args.config,
            endpoint=args.endpoint or "",
            output=args.output,
        )
    )


def _cmd_agent(args: argparse.Namespace) -> int:
    from gpusched.agent.main import AgentArgs, agent_main

    return agent_main(
        AgentArgs(
            kubeconfig=args.kubeconfig,
            node_name=args.node_name,
            interval=args.interval,
            once=args.once,
            log_level=args.log_level,
        )
    )


def _bool_flag(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _number(
    kind: type[int] | type[float], lo: float, hi: float, what: str
) -> Callable[[str], int | float]:
    """An argparse type: a finite `kind` within [lo, hi] (argparse adds the flag's name)."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not lo <= value <= hi:  # also false for nan
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_POSITIVE_INT = _number(int, 1, float("inf"), "a whole number >= 1")
_NON_NEGATIVE_INT = _number(int, 0, float("inf"), "a whole number >= 0")
_POSITIVE_FLOAT = _number(float, 1e-9, float("inf"), "a number > 0")
_NON_NEGATIVE_FLOAT = _number(float, 0.0, float("inf"), "a number >= 0")
_FRACTION = _number(float, 1e-9, 1.0, "a fraction in (0, 1]")
_PORT = _number(int, 0, 65535, "a port number 0-65535 (0: off)")
_POLL_SECONDS = _number(float, 0, 86400, "seconds in [0, 86400] (0: off)")


def _seeds(text: str) -> str:
    """Checked here, kept as text: --protocol fgd and replay have different defaults."""
    from gpusched.sim.fgd_protocol import parse_seeds

    try:
        parse_seeds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _profiles(text: str) -> tuple[str, ...]:
    from gpusched.config.defaults import builtin_profiles

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    known = builtin_profiles()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown built-in profile(s) {unknown or [text]} (known: {', '.join(known)})"
        )
    return names


def check_config_main(path: str, registry: Registry) -> int:
    """`gpusched check-config FILE`: 0 and a one-line summary, or 1 and every error."""
    from gpusched.config import ConfigError, ConfigErrors, load_config
    from gpusched.core.runtime.validate import validate_profiles

    try:
        config = load_config(Path(path), registry)
        validate_profiles(config, registry)
    except ConfigError as exc:
        errors = exc.errors if isinstance(exc, ConfigErrors) else (exc,)
        noun = "error" if len(errors) == 1 else "errors"
        print(f"{path}: {len(errors)} {noun}", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return 1
    n = len(config.profiles)
    print(f"OK: {n} profile{'' if n == 1 else 's'} ({', '.join(config.names)})")
    return 0


def _cmd_check_config(args: argparse.Namespace) -> int:
    from gpusched.plugins import default_registry

    return check_config_main(args.file, default_registry())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpusched", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="run the scheduler over a simulated cluster")
    sim.add_argument(
        "--seed",
        type=int,
        default=1,
        help="demo: the seed of the generated fleet and workload; the same seed gives the same"
        " run (default 1)",
    )
    sim.add_argument(
        "--racks",
        type=_POSITIVE_INT,
        default=16,
        help="demo: racks in the generated fleet, 4 to a spine, each of one node kind"
        " (H100, V100, T4 or CPU-only) (default 16)",
    )
    sim.add_argument(
        "--nodes-per-rack",
        type=_POSITIVE_INT,
        default=8,
        help="demo: nodes in each generated rack (default 8)",
    )
    sim.add_argument(
        "--load",
        type=_POSITIVE_FLOAT,
        default=1.1,
        help="GPU demand of the workload as a multiple of capacity",
    )
    sim.add_argument(
        "--profiles",
        type=_profiles,
        default=DEMO_PROFILES,
        help="comma-separated built-in profiles",
    )
    fgd = sim.add_argument_group("trace protocols (docs/fgd-protocol.md)")
    fgd.add_argument(
        "--protocol",
        choices=("demo", "fgd", "replay"),
        default="demo",
        help="demo: the built-in fleet; fgd: the FGD paper's protocol on an openb trace;"
        " replay: the trace's arrival/departure times (docs/replay-results.md)",
    )
    fgd.add_argument("--trace-dir", help="directory of the openb CSV files")
    fgd.add_argument("--pods", default="openb_pod_list_default.csv", help="pod list file")
    fgd.add_argument(
        "--nodes",
        default="openb_node_list_gpu_node.csv",  # openb.DEFAULT_NODE_FILE
        help="fgd: node list file (e.g. one `gpusched variants write` wrote for a fleet variant)",
    )
    fgd.add_argument(
        "--variant",
        help="fgd: run on a workload variant of --pods (gpusched/sim/variants.py; `gpusched"
        " variants list`), e.g. spec33 or spec33+cpu250; the trace is named <pods>+<variant>",
    )
    fgd.add_argument(
        "--variant-seed",
        type=_NON_NEGATIVE_INT,
        default=0,  # variants.DEFAULT_SEED
        help="the variant's own seed (which pods change), independent of --seeds (default 0)",
    )
    fgd.add_argument(
        "--seeds", type=_seeds, help="e.g. 42-51 or 42,43 (default: fgd 42-51, replay 1)"
    )
    fgd.add_argument(
        "--policies",
        help="comma-separated: Random, DotProduct, GpuPacking, GpuClustering, BestFit, FGD,"
        " LeastAllocated, MostAllocated, ai-scheduler (default: all)",
    )
    fgd.add_argument(
        "--tie-break",
        choices=("node-order", "paper", "random"),  # fgd_protocol.TIE_BREAKS (test_cli)
        default="node-order",
        help="top-score ties: node-order, the daemon's rule (the first node in an order"
        " hashed from the seed and the node name); paper, the first node in the FGD paper's"
        " seeded node order; random, uniform (upstream kube-scheduler). Default: node-order",
    )
    fgd.add_argument(
        "--owners",
        choices=("none", "replicasets"),  # fgd_owners.OWNERS (test_cli)
        default="none",
        help="none: the trace's pods, without owner (the protocol); replicasets: the same"
        " arrivals grouped by shape into seeded ReplicaSets of 3-30 replicas, so"
        " PodTopologySpread's default constraints apply (gpusched/sim/fgd_owners.py)",
    )
    fgd.add_argument(
        "--dra",
        nargs="?",
        const="uniform",
        choices=("uniform", "model"),  # trace_dra.MEMORY_SHAPES (test_trace_dra)
        help="fgd: nodes publish NVIDIA-shaped ResourceSlices and GPU pods ask through"
        " ResourceClaims (gpusched/sim/trace_dra.py); cards' memory uniform (default: a"
        " share's memory request is exact on every card) or the model's (faithful memory,"
        " shares then relative to a 16 GiB card)",
    )
    fgd.add_argument(
        "--tenants",
        type=_NON_NEGATIVE_INT,
        default=0,
        help="fgd and replay: put the trace's pods in N tenants' namespaces, in seeded bursts"
        " (gpusched/sim/tenants.py), and report how each tenant's GPUs spread over nodes;"
        " replay: with quotas, priorities and checkpoints (docs/tenancy-simulation.md)."
        " Default 0: the trace as it is",
    )
    fgd.add_argument(
        "--reference-dir", help="published results (default: <trace-dir>/../../reference)"
    )
    fgd.add_argument(
        "--config",
        help="a scheduler configuration: each of its profiles is measured as a policy named"
        " by its schedulerName (list them in --policies)",
    )
    fgd.add_argument("--json-out", help="write the summary as JSON")
    fgd.add_argument("--curves-out", help="write the allocation curves (CSV)")
    fgd.add_argument("--plot-out", help="write allocation vs arrived demand (PNG)")
    fgd.add_argument("--placements-out", help="write DIR/<policy>-<seed>.csv placements")
    rep = sim.add_argument_group("replay (docs/replay-results.md; also --seeds, --policies)")
    rep.add_argument(
        "--timeout", type=_POSITIVE_FLOAT, default=600.0, help="seconds a pod may wait"
    )
    rep.add_argument(
        "--job-window", type=_NON_NEGATIVE_INT, default=1, help="seconds between a job's pods"
    )
    rep.add_argument(
        "--time-compression", type=_POSITIVE_FLOAT, default=1.0, help="divide arrival times by this"
    )
    rep.add_argument(
        "--cluster-fraction", type=_FRACTION, default=1.0, help="share of each SKU's nodes to keep"
    )
    rep.add_argument(
        "--scrape-interval",
        type=_POSITIVE_FLOAT,
        default=15.0,
        help="seconds between the simulated exporter's telemetry scrapes",
    )
    rep.add_argument(
        "--telemetry-delay",
        type=_NON_NEGATIVE_FLOAT,
        default=10.0,
        help="seconds before a scrape is visible to the scheduler",
    )
    rep.add_argument(
        "--gangs",
        action="store_true",
        help="replay: make every multi-pod job a gang of its size (scheduling.ai/gang-name"
        " annotations), and policy NAME-nogang runs NAME with GangScheduling disabled;"
        " demo: a workload of 2-32 pod gangs and single pods (generate_gang_workload)",
    )
    sim.set_defaults(func=_cmd_simulate)

    run = sub.add_parser("run", help="run the scheduler against a cluster (docs/daemon.md)")
    run.add_argument("--config", help="scheduler configuration YAML (default: built-in profile)")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    run.add_argument(
        "--metrics-port", type=_PORT, default=10259, help="/healthz /readyz /metrics; 0 = off"
    )
    run.add_argument("--log-level", default="info", help="debug, info, warning, error")
    run.add_argument(
        "--leader-elect",
        type=_bool_flag,
        nargs="?",
        const=True,
        default=None,
        metavar="true|false",
        help="schedule only while holding the leader Lease (default: the configuration's"
        " leaderElection.leaderElect, true); --leader-elect=false for a single local run",
    )
    run.add_argument(
        "--config-poll-seconds",
        type=_POLL_SECONDS,
        default=5.0,
        metavar="SECONDS",
        help="how often the --config file is checked for a new version, applied without a"
        " restart (docs/telemetry-reload.md); 0 turns hot reload off",
    )
    run.add_argument(
        "--config-map",
        metavar="NAMESPACE/NAME",
        help="the ConfigMap --config is mounted from: a refused reload's Warning Event"
        " regards it (default: $GPUSCHED_CONFIG_MAP, else the scheduler's own Pod)",
    )
    run.add_argument(
        "--gpu-map",
        action="store_true",
        help="also serve a read-only GPU map on the metrics port: GET /map (HTML: nodes x"
        " cards by use, share and temperature, pending pods and why, gangs, quotas) and"
        " /map.json (docs/gpu-map.md); off by default",
    )
    run.add_argument(
        "--explain-endpoint",
        action="store_true",
        help="also serve GET /explain/NAMESPACE/POD on the metrics port, for `gpusched"
        " explain --endpoint` (docs/explain.md). Off by default: whoever reaches the port"
        " learns which pods exist in every namespace, where they run and on which cards"
        " (docs/security.md), and each answer is a search of up to 20 s of CPU the"
        " scheduling loop shares (one at a time; 429 while one runs)",
    )
    run.set_defaults(func=_cmd_run)

    exp = sub.add_parser(
        "explain",
        help="why a pod is pending and the smallest change that lets it fit (docs/explain.md)",
    )
    exp.add_argument("target", metavar="NAMESPACE/POD", help="the pending pod (or POD with -n)")
    exp.add_argument("-n", "--namespace", help="the pod's namespace when TARGET is a bare name")
    exp.add_argument(
        "--endpoint",
        metavar="URL",
        help="ask the running scheduler (its metrics port, e.g. http://localhost:10259);"
        " default $GPUSCHED_EXPLAIN_ENDPOINT, else compute offline from the API",
    )
    exp.add_argument("--kubeconfig", help="kubeconfig file, offline (default: $KUBECONFIG, ...)")
    exp.add_argument(
        "--config", help="the scheduler's configuration YAML, offline (default: built-in)"
    )
    exp.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="text (default) or json"
    )
    exp.set_defaults(func=_cmd_explain)

    agent = sub.add_parser(
        "agent",
        help="publish this node's GPU inventory from NVML (docs/telemetry-agent.md)",
    )
    agent.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)"
    )
    agent.add_argument(
        "--node-name", help="this node's name (default: $NODE_NAME, the pod's spec.nodeName)"
    )
    agent.add_argument(
        "--interval",
        type=_POSITIVE_FLOAT,
        default=60.0,
        help="seconds between NVML reads (default 60)",
    )
    agent.add_argument(
        "--once", action="store_true", help="read and publish once, then exit (0: done)"
    )
    agent.add_argument("--log-level", default="info", help="debug, info, warning, error")
    agent.set_defaults(func=_cmd_agent)

    var = sub.add_parser(
        "variants", help="workload variants of the openb traces (docs/workload-variants.md)"
    )
    vsub = var.add_subparsers(dest="variants_command", required=True)
    vlist = vsub.add_parser("list", help="print the variants' names and descriptions")
    vlist.set_defaults(func=_cmd_variants_list)
    vwrite = vsub.add_parser(
        "write", help="write each variant's pod list and node list (openb CSV) into --out"
    )
    vwrite.add_argument("--trace-dir", required=True, help="directory of the openb CSV files")
    vwrite.add_argument(
        "--out", required=True, help="output directory, outside any git checkout (created)"
    )
    vwrite.add_argument(
        "--names", nargs="+", help="variants to write (default: every registered one)"
    )
    vwrite.add_argument(
        "--pods", help="base pod list for every variant (default: each variant's own base)"
    )
    vwrite.add_argument("--nodes", default="openb_node_list_gpu_node.csv", help="node list file")
    vwrite.add_argument(
        "--variant-seed", type=_NON_NEGATIVE_INT, default=0, help="the variants' seed (default 0)"
    )
    vwrite.set_defaults(func=_cmd_variants_write)

    chk = sub.add_parser("check-config", help="validate a scheduler configuration file")
    chk.add_argument("file")
    chk.set_defaults(func=_cmd_check_config)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rc: int = args.func(args)
    return rc


def kubectl_main() -> int:
    """`kubectl gpusched ...`: kubectl runs the executable `kubectl-gpusched` found on PATH
    with the words after `gpusched` (the console script of this function)."""
    return main(sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
