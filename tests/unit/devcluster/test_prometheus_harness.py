"""The test harness' Prometheus pieces that need no network: the apt sources read for
mirrors, the .deb unpacked without dpkg, a wrong digest refused, and the fake exporter's
exposition format."""

from __future__ import annotations

import io
import lzma
import tarfile
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpusched.devcluster import prometheus
from gpusched.devcluster.binaries import BinaryNotFoundError
from gpusched.devcluster.fake_dcgm import FakeDcgmExporter


def test_mirrors_come_from_both_apt_source_formats(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text(
        "# a comment\ndeb [arch=amd64] http://mirror.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\ndeb cdrom:/media/ bookworm main\n"
    )
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n"
        "\nTypes: deb\nURIs: https://other.example/debian\nSuites: bookworm\n"
    )
    (d / "ignored.txt").write_text("deb http://not-read.example/debian bookworm main\n")
    found = prometheus.debian_mirrors((tmp_path / "sources.list", d))
    assert found == [
        "http://mirror.example/debian",
        "https://other.example/debian",
        "http://security.example/debian-security",
    ]


def _deb(path: Path, files: dict[str, bytes]) -> None:
    """A minimal .deb: ar archive holding debian-binary, control and data tarballs."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name, blob in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    members = [
        ("debian-binary", b"2.0\n"),
        ("control.tar.xz", lzma.compress(b"")),
        ("data.tar.xz", lzma.compress(data.getvalue())),
    ]
    out = bytearray(b"!<arch>\n")
    for name, blob in members:
        header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(blob):<10}`\n"
        out += header.encode() + blob + (b"\n" if len(blob) % 2 else b"")
    path.write_bytes(bytes(out))


def test_the_binary_is_taken_from_the_data_archive(tmp_path: Path) -> None:
    deb = tmp_path / "p.deb"
    _deb(deb, {"./usr/bin/prometheus": b"#!binary", "./etc/prometheus/prometheus.yml": b"x"})
    prometheus.extract(deb, prometheus.MEMBER, tmp_path / "prometheus")
    assert (tmp_path / "prometheus").read_bytes() == b"#!binary"
    _deb(deb, {"./usr/bin/promtool": b"other"})
    with pytest.raises(BinaryNotFoundError, match=r"no \./usr/bin/prometheus"):
        prometheus.extract(deb, prometheus.MEMBER, tmp_path / "again")


def test_a_deb_whose_digest_differs_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = tmp_path / "mirror"
    package = prometheus.DebianPackage("prometheus", "1.0", "amd64", "0" * 64, "pool/p")
    (mirror / "pool/p").mkdir(parents=True)
    _deb(mirror / "pool/p" / package.file, {"./usr/bin/prometheus": b"tampered"})
    monkeypatch.setattr(prometheus.shutil, "which", lambda _: None)
    monkeypatch.setattr(prometheus, "debian_mirrors", lambda: [mirror.as_uri()])
    into = tmp_path / "into"
    into.mkdir()
    with pytest.raises(BinaryNotFoundError, match="SHA-256 differs"):
        prometheus.fetch(package, into, lambda _m: None)
    assert not (into / package.file).exists()


def test_an_override_names_the_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "prometheus"
    binary.write_text("#!/bin/sh\n")
    monkeypatch.setenv("GPUSCHED_PROMETHEUS", str(binary))
    with pytest.raises(BinaryNotFoundError, match="not an executable"):
        prometheus.find_prometheus()
    binary.chmod(0o755)
    assert prometheus.find_prometheus() == binary


def test_the_fake_exporter_speaks_dcgm_exporters_format() -> None:
    exporter = FakeDcgmExporter()
    exporter.add_node("node-a", 2, uuids=["GPU-a0", "GPU-a1"])
    exporter.set("node-a", gpu=1, temp=84, xid=79, power=301.25)
    exporter.set("node-a", gpu=0, memory_temp=None)  # not exported, like a DCGM blank
    text = exporter.render()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "DCGM_FI_DEV_POWER_MGMT_LIMIT" not in families  # not a default counter
    temp = {s.labels["gpu"]: s for s in families["DCGM_FI_DEV_GPU_TEMP"].samples}
    assert temp["1"].value == 84
    assert temp["1"].labels == {
        "gpu": "1",
        "UUID": "GPU-a1",
        "pci_bus_id": "00000000:08:00.0",
        "device": "nvidia1",
        "modelName": "NVIDIA A100-SXM4-80GB",
        "Hostname": "node-a",
        "DCGM_FI_DRIVER_VERSION": "550.90.07",
    }
    (xid,) = [s for s in families["DCGM_FI_DEV_XID_ERRORS"].samples if s.labels["gpu"] == "1"]
    assert (xid.value, xid.labels["err_code"]) == (79, "79")
    assert xid.labels["err_msg"] == "GPU has fallen off the bus"
    assert [s.labels["gpu"] for s in families["DCGM_FI_DEV_MEMORY_TEMP"].samples] == ["1"]
    assert 'DCGM_FI_DEV_POWER_USAGE{gpu="1"' in text and "} 301.250000" in text
    assert "# TYPE DCGM_FI_DEV_FB_FREE gauge" in text
    with pytest.raises(ValueError, match="unknown readings"):
        exporter.set("node-a", temperature=1)
