"""Per-pod placements of the FGD protocol, compared between two trees or two result sets.

    .venv/bin/python bench/placements_diff.py --base-ref 18049d5 [--seeds 47]
    .venv/bin/python bench/placements_diff.py BASE_DIR_OR_CSV HEAD_DIR_OR_CSV

A speed-up must not move a single pod. With `--base-ref`, the FGD protocol (`gpusched
simulate --protocol fgd --placements-out`) runs once at that git revision (checked out in a
temporary worktree, removed afterwards) and once in this tree, one after the other, and
every pod's node, cards and milli-GPU are compared. With two paths, it compares two
`--placements-out` results written earlier (directories of <policy>-<seed>.csv, or single
files). Prints the number of differing pods and the first differences; exits 1 when any
pod differs or a file is missing on one side, 0 when every placement is identical.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
Row = tuple[str, str, str, str]  # pod, node, gpu_ids, gpu_milli


def read_csv(path: Path) -> dict[int, Row]:
    with path.open(newline="") as fh:
        return {
            int(r["seq"]): (r["pod"], r["node"], r["gpu_ids"], r["gpu_milli"])
            for r in csv.DictReader(fh)
        }


def pairs(base: Path, head: Path) -> list[tuple[str, Path, Path]]:
    """The files to compare: the two files, or the same-named CSVs of two directories."""
    if base.is_file() and head.is_file():
        return [(base.name, base, head)]
    names = sorted({p.name for d in (base, head) for p in d.glob("*.csv")})
    return [(n, base / n, head / n) for n in names]


def compare(base: Path, head: Path, show: int = 5) -> int:
    """Number of differing pods (a file present on one side only counts as all its pods)."""
    total = 0
    for name, b, h in pairs(base, head):
        if not b.exists() or not h.exists():
            print(f"{name}: only in {'head' if not b.exists() else 'base'}")
            total += len(read_csv(h if not b.exists() else b)) or 1
            continue
        rb, rh = read_csv(b), read_csv(h)
        seqs = sorted(set(rb) | set(rh))
        diff = [s for s in seqs if rb.get(s) != rh.get(s)]
        placed = sum(1 for r in rb.values() if r[1])
        verdict = "identical" if not diff else f"{len(diff)} differ"
        print(f"{name}: {len(seqs)} pods ({placed} placed in base): {verdict}")
        for s in diff[:show]:
            print(f"  seq {s}: base {rb.get(s)}  head {rh.get(s)}")
        total += len(diff)
    return total


def simulate(tree: Path, out: Path, args: argparse.Namespace) -> None:
    """The FGD protocol with the code of `tree` (its package first on sys.path)."""
    cmd = [
        sys.executable,
        "-m",
        "gpusched.cli",
        "simulate",
        "--protocol",
        "fgd",
        "--trace-dir",
        args.trace_dir,
        "--seeds",
        args.seeds,
        "--policies",
        args.policies,
        "--placements-out",
        str(out),
    ]
    for pods in args.pods:
        cmd += ["--pods", pods]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    print(f"running {tree} ...", flush=True)
    done = subprocess.run(cmd, check=True, env=env, cwd=tree, capture_output=True, text=True)
    # The per-seed lines: unallocated GPU % at 100 % arrived, seconds, us per pod.
    for text in done.stdout.splitlines():
        if " seed " in text:
            print(" ", text.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("paths", nargs="*", type=Path, help="BASE HEAD: directories or CSV files")
    ap.add_argument("--base-ref", help="git revision to compare this tree against")
    ap.add_argument("--trace-dir", default=str(ROOT.parent / "shared" / "traces" / "openb"))
    ap.add_argument("--pods", action="append", help="pod CSV (repeatable; default: default)")
    ap.add_argument("--seeds", default="47")
    ap.add_argument("--policies", default="ai-scheduler")
    ap.add_argument("--keep", type=Path, help="keep the two result sets under this directory")
    args = ap.parse_args(argv)
    args.pods = args.pods or ["openb_pod_list_default.csv"]
    if args.paths:
        if len(args.paths) != 2 or args.base_ref:
            ap.error("give BASE HEAD, or --base-ref alone")
        return 1 if compare(*args.paths) else 0
    if not args.base_ref:
        ap.error("give BASE HEAD, or --base-ref REV")
    with tempfile.TemporaryDirectory(prefix="placements-") as tmp:
        work = args.keep or Path(tmp)
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.base_ref],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        try:
            simulate(tree, work / "base", args)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True
            )
        simulate(ROOT, work / "head", args)
        return 1 if compare(work / "base", work / "head") else 0


if __name__ == "__main__":
    sys.exit(main())
