"""openb CSV loader: parsing, optional columns, and error positions."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusched.sim.fgd_workload import PodResource, build_workload, typical_pods
from gpusched.sim.openb import (
    DEFAULT_NODE_FILE,
    DEFAULT_POD_FILE,
    POD_COLUMNS,
    TraceFormatError,
    TraceNode,
    TracePod,
    load_nodes,
    load_pods,
)
from tests.traces import require_openb

NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
n-0,64000,262144,2,P100
n-1,96000,786432,8,G2
n-2,32000,262144,0,
"""

PODS_CSV = (
    ",".join(POD_COLUMNS)
    + """
p-0,12000,16384,1,1000,,LS,Running,0,12537496,0
p-1,6000,12288,1,460,V100M16|V100M32,BE,Pending,427061,12902960,
p-2,4000,8192,0,0,,LS,Failed,5,,
"""
)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_load_nodes(tmp_path: Path) -> None:
    _write(tmp_path, "nodes.csv", NODES_CSV)
    assert load_nodes(tmp_path, "nodes.csv") == [
        TraceNode("n-0", 64000, 262144, 2, "P100"),
        TraceNode("n-1", 96000, 786432, 8, "G2"),
        TraceNode("n-2", 32000, 262144, 0, ""),
    ]


def test_load_pods_all_columns(tmp_path: Path) -> None:
    _write(tmp_path, "pods.csv", PODS_CSV)
    pods = load_pods(tmp_path, "pods.csv")
    assert pods[0] == TracePod("p-0", 12000, 16384, 1, 1000, "", "LS", "Running", 0, 12537496, 0)
    assert pods[1].gpu_spec == "V100M16|V100M32"
    assert pods[1].scheduled_time is None
    assert pods[2] == TracePod("p-2", 4000, 8192, 0, 0, "", "LS", "Failed", 5, None, None)


def test_load_pods_five_column_variant(tmp_path: Path) -> None:
    # The multigpu* variants of the trace ship only the resource columns.
    _write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,10,8,1000\n")
    assert load_pods(tmp_path, "pods.csv") == [TracePod("p", 1000, 10, 8, 1000)]


def test_blank_lines_and_bom_are_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_bytes(("\ufeff" + NODES_CSV + "\n\n").encode())
    assert len(load_nodes(tmp_path, "nodes.csv")) == 3


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"absent\.csv"):
        load_pods(tmp_path, "absent.csv")


def test_default_file_names() -> None:
    assert DEFAULT_NODE_FILE == "openb_node_list_gpu_node.csv"
    assert DEFAULT_POD_FILE == "openb_pod_list_default.csv"


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("sn,cpu_milli,memory_mib,gpu\nn,1,1,1\n", 1, "model", "missing columns"),
        (NODES_CSV + "n-3,64000,abc,2,T4\n", 5, "memory_mib", "expected an integer"),
        (NODES_CSV + "n-3,64000,1,-2,T4\n", 5, "gpu", "non-negative"),
        (NODES_CSV + "n-3,64000,1,2\n", 5, None, "expected 5 cells, found 4"),
        (NODES_CSV + "n-0,64000,1,2,T4\n", 5, "sn", "duplicate 'n-0'"),
        (NODES_CSV + ",64000,1,2,T4\n", 5, "sn", "empty value"),
        (NODES_CSV + "n-3,64000,1,2,\n", 5, "model", "needs a GPU model"),
        ("", 1, None, "empty file"),
        ("sn,sn,cpu_milli,memory_mib,gpu,model\n", 1, "sn", "duplicated column"),
    ],
)
def test_node_errors_name_file_line_and_column(
    tmp_path: Path, text: str, line: int, column: str | None, fragment: str
) -> None:
    path = _write(tmp_path, "nodes.csv", text)
    with pytest.raises(TraceFormatError) as info:
        load_nodes(tmp_path, "nodes.csv")
    err = info.value
    assert (err.path, err.line, err.column) == (path, line, column)
    assert fragment in str(err)
    assert f"{path}:{line}" in str(err)


def test_pod_error_line_counts_blank_lines(tmp_path: Path) -> None:
    _write(tmp_path, "pods.csv", PODS_CSV + "\np-3,1000,1,1,x5,,LS,Running,1,2,3\n")
    with pytest.raises(TraceFormatError, match=r"pods\.csv:6: column 'gpu_milli'"):
        load_pods(tmp_path, "pods.csv")


def test_pod_error_in_optional_time_column(tmp_path: Path) -> None:
    _write(tmp_path, "pods.csv", PODS_CSV + "p-3,1000,1,1,5,,LS,Running,1,2,-3\n")
    with pytest.raises(TraceFormatError, match="column 'scheduled_time'"):
        load_pods(tmp_path, "pods.csv")


def test_real_default_trace() -> None:
    directory = require_openb(DEFAULT_POD_FILE)
    nodes = load_nodes(directory)
    pods = load_pods(directory)
    assert len(nodes) == 1213
    assert sum(n.gpu for n in nodes) == 6212
    assert len(pods) == 8152
    assert sum(p.num_gpu * p.gpu_milli for p in pods) == 6086800
    # The seed-42 arrival sequence, as printed by a Go replica of the simulator's calls
    # (Seed, Int, Shuffle, tuneUpPods, Perm) on this CSV with Go's own math/rand.
    wl = build_workload(pods, nodes, seed=42)
    assert len(wl.pods) == 10866
    assert wl.requested_milli_gpu == 8075080
    names = [p.name for p in wl.pods]
    assert names[:2] == ["openb-pod-0255", "openb-pod-1685"]
    assert names[8151:8153] == ["openb-pod-0538", "openb-pod-3888-tuned-0"]
    assert names[-1] == "openb-pod-5877-tuned-2713"
    assert wl.node_names[:3] == (
        "0620-openb-node-0000",
        "1012-openb-node-0001",
        "0611-openb-node-0002",
    )
    target = typical_pods(pods)
    assert len(target) == 35
    assert target[0].resource == PodResource(3152, 810, 1, "")
