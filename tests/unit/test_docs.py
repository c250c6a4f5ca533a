"""The operating docs agree with the code: docs/metrics.md lists every metric the daemon
exports and its alerts name only those; the pages the README links exist, and their
relative links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpusched.cli import check_config_main
from gpusched.observability.metrics import Metrics
from gpusched.plugins import default_registry

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
OPERATING = (
    "install.md",
    "upgrade.md",
    "uninstall.md",
    "supported-versions.md",
    "limitations.md",
    "troubleshooting.md",
    "metrics.md",
    "explain.md",
)
OURS = re.compile(r"\b(?:scheduler|gpusched)_[a-z_]+\b")


def exported() -> dict[str, set[str]]:
    """Each metric family's name as /metrics shows it -> every sample name it exposes."""
    out: dict[str, set[str]] = {}
    for family in Metrics().registry.collect():
        if family.type == "counter":
            out[f"{family.name}_total"] = {f"{family.name}_total", f"{family.name}_created"}
        elif family.type == "histogram":
            suffixes = ("_bucket", "_sum", "_count", "_created")
            out[family.name] = {family.name + s for s in suffixes}
        else:
            out[family.name] = {family.name}
    return out


def yaml_blocks(text: str) -> list[object]:
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    return [doc for b in blocks for doc in yaml.safe_load_all(b) if doc]


def test_the_metrics_table_lists_exactly_the_exported_metrics() -> None:
    text = (DOCS / "metrics.md").read_text()
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", text, re.MULTILINE))
    assert rows == set(exported())


def test_the_example_alerts_name_only_exported_series() -> None:
    samples = set().union(*exported().values())
    rules = [
        rule
        for doc in yaml_blocks((DOCS / "metrics.md").read_text())
        if isinstance(doc, dict) and doc.get("kind") == "PrometheusRule"
        for group in doc["spec"]["groups"]
        for rule in group["rules"]
    ]
    assert len(rules) >= 8
    for rule in rules:
        assert rule["alert"] and rule["expr"] and rule["labels"]["severity"]
        named = set(OURS.findall(rule["expr"]))
        assert named <= samples, (rule["alert"], named - samples)
        # kube-scheduler exports the same scheduler_* names: every series is selected by job.
        for metric in named:
            assert re.search(rf"{metric}\{{job=\"gpusched-metrics\"", rule["expr"]), rule["alert"]


def test_the_readme_links_every_operating_page_and_they_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in OPERATING:
        assert (DOCS / page).is_file(), page
        assert f"(docs/{page})" in readme, page


def test_relative_links_of_the_operating_pages_resolve() -> None:
    for page in OPERATING:
        text = (DOCS / page).read_text()
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert (DOCS / target).exists(), f"{page}: {target}"


def test_configuration_snippets_in_the_operating_pages_pass_check_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snippets = [
        doc
        for page in OPERATING
        for doc in yaml_blocks((DOCS / page).read_text())
        if isinstance(doc, dict) and doc.get("kind") == "GpuSchedulerConfiguration"
    ]
    assert snippets  # limitations.md's: scoring preferred node affinity and taints
    for i, doc in enumerate(snippets):
        path = tmp_path / f"snippet-{i}.yaml"
        path.write_text(yaml.safe_dump(doc))
        assert check_config_main(str(path), default_registry()) == 0, capsys.readouterr().err
