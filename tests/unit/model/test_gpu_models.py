"""The one table of GPU model names: short names and GFD product names as one model."""

from __future__ import annotations

import pytest

from gpusched.model import keys
from gpusched.model.gpu_models import (
    KNOWN_MODELS,
    canonical,
    canonical_models,
    describe,
    product_name,
    spellings,
)
from gpusched.model.pod import pod_from_k8s


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("A100M80", "A100M80"),
        ("NVIDIA-A100-SXM4-80GB", "A100M80"),
        ("T4", "T4"),
        ("Tesla-T4", "T4"),
        ("V100M32", "V100M32"),
        ("Tesla-V100-SXM2-32GB", "V100M32"),
        ("G2", "G2"),
        # Unknown: itself, whitespace as GFD writes it, case kept.
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("  NVIDIA H100 80GB HBM3 ", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA A100-SXM4-80GB", "A100M80"),  # an NVML name still finds its short name
        ("tesla-t4", "tesla-t4"),
    ],
)
def test_canonical(name: str, expected: str) -> None:
    assert canonical(name) == expected


def test_table_is_one_to_one_and_round_trips() -> None:
    shorts = [m.short for m in KNOWN_MODELS]
    products = [m.product for m in KNOWN_MODELS]
    assert len(set(shorts)) == len(shorts) and len(set(products)) == len(products)
    for m in KNOWN_MODELS:
        assert canonical(m.product) == m.short == canonical(m.short)
        assert product_name(m.short) == m.product == product_name(m.product)
    # A short name is never another model's product (that would merge two models).
    for m in KNOWN_MODELS:
        assert all(o.product != m.short for o in KNOWN_MODELS if o is not m)


def test_spellings_and_describe() -> None:
    assert spellings("Tesla-T4") == ("T4", "Tesla-T4")
    assert spellings("G2") == ("G2",)
    assert spellings("NVIDIA-H100-80GB-HBM3") == ("NVIDIA-H100-80GB-HBM3",)
    assert describe(["A100M80", "G3", "H100"]) == "A100M80 (NVIDIA-A100-SXM4-80GB), G3, H100"
    assert describe(["H100", "Tesla-T4"], sep=" or ") == "H100 or T4 (Tesla-T4)"


def test_a_pods_models_are_parsed_to_canonical_names_once_each() -> None:
    assert canonical_models(["Tesla-T4", "T4", "NVIDIA-A100-SXM4-80GB"]) == ("T4", "A100M80")
    pod = pod_from_k8s(
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "annotations": {keys.GPU_MODEL: "NVIDIA-A100-SXM4-80GB | T4|Tesla-T4"},
            },
            "spec": {"containers": [{"name": "c"}]},
        }
    )
    assert pod.errors == ()
    assert pod.request.gpu_models == ("A100M80", "T4")
