"""InterPodAffinity's args: kube-scheduler's defaults, the weight range, YAML input."""

from __future__ import annotations

import pytest

from gpusched.config import config_from_dict
from gpusched.plugins import default_registry
from gpusched.plugins.inter_pod_affinity import InterPodAffinity, InterPodAffinityArgs
from tests.builders import config_doc, config_load_error, snapshot
from tests.fakes import FakeHandle


def test_defaults_are_kube_schedulers() -> None:
    args = InterPodAffinityArgs()
    assert (args.hard_pod_affinity_weight, args.ignore_preferred_terms_of_existing_pods) == (
        1,
        False,
    )
    assert args.validate() == []


@pytest.mark.parametrize("weight", [-1, 101])
def test_hard_pod_affinity_weight_out_of_range(weight: int) -> None:
    doc = config_doc(
        {"pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": weight}}]}
    )
    message = config_load_error(doc, default_registry())
    assert "hardPodAffinityWeight" in message
    assert f"Invalid value: {weight}: not in valid range [0-100]" in message
    with pytest.raises(ValueError, match="not in valid range"):
        InterPodAffinity(
            InterPodAffinityArgs(hard_pod_affinity_weight=weight), FakeHandle(snapshot())
        )


def test_yaml_args_reach_the_plugin() -> None:
    doc = config_doc(
        {
            "pluginConfig": [
                {
                    "name": "InterPodAffinity",
                    "args": {
                        "hardPodAffinityWeight": 5,
                        "ignorePreferredTermsOfExistingPods": True,
                    },
                }
            ]
        }
    )
    cfg = config_from_dict(doc, default_registry())
    assert cfg.profiles[0].plugin_args["InterPodAffinity"] == InterPodAffinityArgs(5, True)
