"""A real Prometheus for the telemetry tests and demos: Debian's `prometheus` package,
fetched and unpacked into the binary cache without root, and a server started on a free
loopback port with a generated config.

**The binary.** Pinned to one Debian package (PINNED: version, file name, SHA-256 of the
.deb). `install()` puts its `usr/bin/prometheus` at

    ${GPUSCHED_CACHE:-~/.cache/gpusched}/bin/prometheus-<version>/prometheus

trying, in order: `apt-get download prometheus=<version>` (no root needed; works when the
machine's apt lists know the version), then the package pool of every Debian mirror the
machine's apt sources name (`<mirror>/pool/main/p/prometheus/<file>`: a clean CI machine
may have sources but no lists). Either way the .deb must match the pinned SHA-256 before
anything is unpacked: the digest is the trust anchor, so any mirror (or a copy dropped in
by hand) is as good as another, and an unexpected file is refused. The .deb is an `ar`
archive; `data.tar.xz` is read with the standard library, so dpkg is not needed either.
A Debian security update that replaces the version: bump PINNED (version, file, digest
from `apt-cache show prometheus`) in one commit. `$GPUSCHED_PROMETHEUS` names a binary to
use instead (another platform, or a prometheus already installed).

**The server.** `PrometheusServer(workdir, targets)` scrapes the `targets` (host:port) every
second (file-based service discovery, so `set_targets` changes them live), keeps its TSDB
in `workdir`, listens on 127.0.0.1 on a free port and is ready once `/-/ready` answers.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import lzma
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpusched.devcluster.binaries import BinaryNotFoundError, cache_dir
from gpusched.devcluster.processes import (
    Process,
    StartError,
    free_port,
    http_ok,
    port_in_use_error,
    wait_ready,
)


@dataclass(frozen=True, slots=True)
class DebianPackage:
    name: str
    version: str
    arch: str
    sha256: str
    pool: str  # the package's directory under a mirror's pool/

    @property
    def file(self) -> str:
        return f"{self.name}_{self.version}_{self.arch}.deb"


# bookworm's prometheus (2.42.0, point release 12.x): `apt-cache show prometheus`.
PINNED = {
    "amd64": DebianPackage(
        "prometheus",
        "2.42.0+ds-5+deb12u1",
        "amd64",
        "81d59a24fce84f7fbe97a45a4f2914b6a5881b5cd1db2a6a0e129e515e1a5f55",
        "pool/main/p/prometheus",
    ),
}
MEMBER = "./usr/bin/prometheus"  # what is taken from the package's data.tar.xz
START_ATTEMPTS = 3


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def pinned() -> DebianPackage:
    arch = _arch()
    package = PINNED.get(arch)
    if package is None:
        raise BinaryNotFoundError(
            f"no pinned prometheus package for {arch}: set $GPUSCHED_PROMETHEUS to a"
            " prometheus binary (2.x), or pin one in gpusched/devcluster/prometheus.py"
        )
    return package


def binary_path(package: DebianPackage | None = None) -> Path:
    package = package or pinned()
    return cache_dir() / "bin" / f"prometheus-{package.version}" / "prometheus"


def find_prometheus() -> Path:
    """The prometheus binary to run, or BinaryNotFoundError saying how to get it."""
    override = os.environ.get("GPUSCHED_PROMETHEUS")
    if override:
        path = Path(override)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise BinaryNotFoundError(f"$GPUSCHED_PROMETHEUS={override} is not an executable file")
    path = binary_path()
    if path.is_file() and os.access(path, os.X_OK):
        return path
    raise BinaryNotFoundError(
        f"prometheus is not in the binary cache ({path}). Run `make prometheus` (fetches"
        " Debian's package, no root needed) or set $GPUSCHED_PROMETHEUS."
    )


# -- install -----------------------------------------------------------------------------


def install(log: Callable[[str], None] = lambda _m: None) -> Path:
    """The pinned binary in the cache, fetched and unpacked if it is not there yet."""
    with contextlib.suppress(BinaryNotFoundError):
        return find_prometheus()
    package = pinned()
    dest = binary_path(package)
    dest.parent.parent.mkdir(parents=True, exist_ok=True)
    # Two installs at once (two test runs, make -j) must not race on the final move.
    with (dest.parent.parent / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if dest.is_file():
            return dest
        with tempfile.TemporaryDirectory(prefix="gpusched-prometheus-") as tmp:
            deb = fetch(package, Path(tmp), log)
            staging = Path(tmp) / "out"
            staging.mkdir()
            extract(deb, MEMBER, staging / "prometheus")
            (staging / "prometheus").chmod(0o755)
            shutil.rmtree(dest.parent, ignore_errors=True)
            staging.rename(dest.parent)
    log(f"prometheus {package.version} -> {dest}")
    return dest


def fetch(package: DebianPackage, into: Path, log: Callable[[str], None]) -> Path:
    """The .deb, verified against the pinned digest; every way tried before giving up."""
    tried: list[str] = []
    target = into / package.file
    if shutil.which("apt-get"):
        spec = f"{package.name}={package.version}"
        run = subprocess.run(
            ["apt-get", "download", "-q", spec],
            cwd=into,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if run.returncode == 0 and target.is_file():
            if _digest(target) == package.sha256:
                log(f"fetched {package.file} with apt-get download")
                return target
            tried.append(f"apt-get download {spec}: SHA-256 differs from the pinned digest")
        else:
            last = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
            tried.append(f"apt-get download {spec}: {last[0]}")
        target.unlink(missing_ok=True)
    for mirror in debian_mirrors():
        url = f"{mirror.rstrip('/')}/{package.pool}/{urllib.parse.quote(package.file)}"
        try:
            with urllib.request.urlopen(url, timeout=60) as response, target.open("wb") as out:
                shutil.copyfileobj(response, out)
        except (urllib.error.URLError, OSError) as exc:
            tried.append(f"{url}: {getattr(exc, 'reason', exc)}")
            continue
        if _digest(target) == package.sha256:
            log(f"fetched {url}")
            return target
        tried.append(f"{url}: SHA-256 differs from the pinned digest")
        target.unlink(missing_ok=True)
    raise BinaryNotFoundError(
        f"cannot fetch {package.file} (SHA-256 {package.sha256}). Tried:\n  "
        + "\n  ".join(tried or ["nothing: no apt-get and no Debian mirror in the apt sources"])
        + "\nIf Debian replaced the version, pin the new one (PINNED in"
        " gpusched/devcluster/prometheus.py), or set $GPUSCHED_PROMETHEUS to a binary."
    )


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def debian_mirrors(
    roots: Sequence[Path] = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d")),
) -> list[str]:
    """The archive URIs the machine's apt sources name (one-line and deb822 formats), the
    main archive's before the security archive's; file: and cdrom: sources left out."""
    texts: list[str] = []
    for root in roots:
        paths = sorted(root.glob("*")) if root.is_dir() else [root]
        for path in paths:
            if path.suffix in (".list", ".sources") or path.name == "sources.list":
                with contextlib.suppress(OSError):
                    texts.append(path.read_text())
    found: list[str] = []
    for text in texts:
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            one = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
            if one:
                found.append(one.group(1))
            elif line.lower().startswith("uris:"):
                found.extend(line.split(":", 1)[1].split())
    web = [u for u in dict.fromkeys(found) if u.startswith(("http://", "https://"))]
    return sorted(web, key=lambda u: ("security" in u, "debian" not in u))


def _ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """The members of an `ar` archive (a .deb's outer format)."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        start = pos + 60
        yield name, data[start : start + size]
        pos = start + size + (size % 2)


def extract(deb: Path, member: str, dest: Path) -> None:
    """One file of a .deb's data archive, written to `dest`."""
    for name, member_bytes in _ar_members(deb.read_bytes()):
        if not name.startswith("data.tar"):
            continue
        blob = lzma.decompress(member_bytes) if name.endswith(".xz") else member_bytes
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            try:
                info = tar.getmember(member)
            except KeyError:
                raise BinaryNotFoundError(f"{deb.name} has no {member}") from None
            source = tar.extractfile(info)
            if source is None:
                raise BinaryNotFoundError(f"{member} in {deb.name} is not a regular file")
            with source, dest.open("wb") as out:
                shutil.copyfileobj(source, out)
        return
    raise BinaryNotFoundError(f"{deb.name} has no data.tar member")


# -- the server ----------------------------------------------------------------------------


SCRAPE_JOB = "dcgm"


def scrape_config(targets_file: Path, interval: str = "1s") -> str:
    doc: dict[str, Any] = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [
            {
                "job_name": SCRAPE_JOB,
                "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
            }
        ],
    }
    return json.dumps(doc, indent=2)  # YAML is a superset of JSON


class PrometheusServer:
    """Prometheus on 127.0.0.1:<free port>, scraping `targets` every `interval`."""

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str] = (),
        *,
        interval: str = "1s",
        attached: bool = True,
        start_timeout: float = 60.0,
    ) -> None:
        self.workdir = workdir
        self.interval = interval
        self.attached = attached
        self.start_timeout = start_timeout
        self.port = 0
        self.process: Process | None = None
        self.targets_file = workdir / "targets.json"
        self._targets = list(targets)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_targets(self, targets: Sequence[str]) -> None:
        """Scrape these host:port targets from now on (file discovery picks the file up
        within about a second)."""
        self._targets = list(targets)
        doc = [{"targets": self._targets, "labels": {}}] if self._targets else []
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.rename(self.targets_file)  # atomic: never a half-written file read

    def start(self) -> PrometheusServer:
        binary = find_prometheus()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.set_targets(self._targets)
        config = self.workdir / "prometheus.yml"
        config.write_text(scrape_config(self.targets_file, self.interval))
        for attempt in range(1, START_ATTEMPTS + 1):
            self.port = free_port()
            self.process = Process(
                "prometheus",
                [
                    str(binary),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=2h",
                    "--log.level=warn",
                ],
                self.workdir / "prometheus.log",
            )
            self.process.start(attached=self.attached)
            try:
                wait_ready(
                    self.process,
                    lambda: http_ok(f"{self.url}/-/ready"),
                    timeout=self.start_timeout,
                    hint="See the log for a config or flag this prometheus does not accept.",
                )
                return self
            except StartError as exc:
                self.process.stop()
                if not port_in_use_error(exc) or attempt == START_ATTEMPTS:
                    raise
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def main(argv: Sequence[str]) -> int:
    """`python -m gpusched.devcluster prometheus` (what `make prometheus` runs) calls this
    with ["install"]; `python -m gpusched.devcluster.prometheus install` works too."""
    if list(argv) != ["install"]:
        print("usage: python -m gpusched.devcluster.prometheus install", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        path = install(lambda m: print(f"prometheus: {m}", flush=True))
    except BinaryNotFoundError as exc:
        print(f"prometheus: error: {exc}", file=sys.stderr)
        return 1
    print(f"prometheus: {path} ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
