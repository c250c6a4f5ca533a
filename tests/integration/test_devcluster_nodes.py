"""The harness's pure parts, no cluster needed: node generation, configs, pinned versions.
The node objects are checked with the scheduler's own parser, so the fake fleet is one the
scheduler reads exactly as it would a real GPU fleet."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from gpusched.devcluster import generated_fleet, node_object, pinned_versions, read_openb_csv
from gpusched.devcluster.binaries import TOOLS_DIR
from gpusched.devcluster.configs import kube_scheduler_config, kwok_config
from gpusched.devcluster.nodes import KWOK_ANNOTATION
from gpusched.model import keys, node_from_k8s


def test_generated_fleet_mixes_three_shapes_in_racks_and_spines() -> None:
    fleet = generated_fleet(64)

    assert Counter((s.gpus, s.model) for s in fleet) == {
        (8, "A100M80"): 16,
        (8, "V100M32"): 16,
        (2, "T4"): 32,
    }
    assert len({s.rack for s in fleet}) == 8  # 8 nodes a rack
    assert len({s.spine for s in fleet}) == 2  # 4 racks a spine
    assert generated_fleet(64) == fleet
    assert len({s.name for s in fleet}) == 64


def test_node_object_is_read_by_the_scheduler_as_a_gpu_node_with_inventory() -> None:
    spec = generated_fleet(1)[0]
    obj = node_object(spec)

    model = node_from_k8s(obj)

    assert obj["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
    assert obj["status"]["allocatable"][keys.GPU_RESOURCE] == "8"
    assert obj["metadata"]["labels"][keys.GFD_COUNT] == "8"
    assert model.gpu_source == "inventory"
    assert model.warnings == ()
    assert [c.memory_mib for c in model.cards] == [81920] * 8
    assert {c.nvlink_island for c in model.cards} == {0}
    assert (model.rack, model.spine) == ("rack-000", "spine-00")
    assert model.cpu_milli == 96_000


def test_openb_csv_rows_become_nodes(tmp_path: Path) -> None:
    csv = tmp_path / "openb_node_list_gpu_node.csv"
    csv.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        "openb-node-0227,64000,262144,2,P100\n"
        "openb-node-0228,96000,786432,8,G2\n"
        "openb-node-0229,32000,131072,0,\n"
    )

    specs = read_openb_csv(csv)
    models = [node_from_k8s(node_object(s)) for s in specs]

    assert [s.name for s in specs] == ["openb-node-0227", "openb-node-0228", "openb-node-0229"]
    assert [m.gpu_count for m in models] == [2, 8, 0]
    assert models[0].cards[0].model == "P100"
    assert keys.GPU_RESOURCE not in node_object(specs[2])["status"]["capacity"]
    assert len(read_openb_csv(csv, limit=2)) == 2


def test_openb_csv_errors_name_the_line(tmp_path: Path) -> None:
    csv = tmp_path / "bad.csv"
    csv.write_text("sn,cpu_milli,memory_mib,num_gpu,model\nn0,1000,1024,2,T4\nn1,lots,1024,2,T4\n")
    with pytest.raises(ValueError, match=r"bad.csv:3"):
        read_openb_csv(csv)
    csv.write_text("name,gpus\nn0,2\n")
    with pytest.raises(ValueError, match="expected columns"):
        read_openb_csv(csv)


def test_kwok_config_selects_only_annotated_nodes_without_heartbeats() -> None:
    docs = list(yaml.safe_load_all(kwok_config()))

    options = docs[0]["options"]
    assert options["manageNodesWithAnnotationSelector"] == "kwok.x-k8s.io/node=fake"
    assert options["nodeLeaseDurationSeconds"] == 0
    stages = {d["metadata"]["name"] for d in docs[1:]}
    assert stages == {"node-initialize", "pod-ready", "pod-complete", "pod-delete"}


def test_kube_scheduler_baseline_packs_gpus() -> None:
    config = yaml.safe_load(kube_scheduler_config(Path("/k")))

    assert config["percentageOfNodesToScore"] == 100
    (profile,) = config["profiles"]
    (fit,) = profile["pluginConfig"]
    strategy = fit["args"]["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"
    weights = {r["name"]: r["weight"] for r in strategy["resources"]}
    assert weights[keys.GPU_RESOURCE] > max(weights["cpu"], weights["memory"])


def test_pinned_versions_come_from_the_wrapper_modules() -> None:
    versions = pinned_versions()

    assert versions["k8s"] == "v1.36.3"
    assert versions["etcd"].startswith("v3.6.")
    for component, version in versions.items():
        assert version in (TOOLS_DIR / component / "go.mod").read_text()
