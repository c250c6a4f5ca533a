"""Where tools/build.sh puts the control plane's binaries, and which versions are pinned.

The wrapper modules' go.mod files under tools/ are the single source of truth for versions;
build.sh and this module both read them, so a version bump is one edit.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO_ROOT / "tools"

# component -> (module whose version names the cache directory, binaries it provides)
COMPONENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "k8s": (
        "k8s.io/kubernetes",
        ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
    ),
    "etcd": ("go.etcd.io/etcd/server/v3", ("etcd",)),
    "kwok": ("sigs.k8s.io/kwok", ("kwok",)),
}


class BinaryNotFoundError(RuntimeError):
    pass


def cache_dir() -> Path:
    root = os.environ.get("GPUSCHED_CACHE") or str(Path.home() / ".cache" / "gpusched")
    return Path(root)


def pinned_version(component: str) -> str:
    module, _ = COMPONENTS[component]
    go_mod = TOOLS_DIR / component / "go.mod"
    try:
        text = go_mod.read_text()
    except OSError as exc:
        raise BinaryNotFoundError(
            f"cannot read {go_mod} ({exc}); gpusched.devcluster runs from a source checkout"
        ) from exc
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if not match:
        raise BinaryNotFoundError(f"{go_mod} does not require {module}")
    return match.group(1)


def pinned_versions() -> dict[str, str]:
    return {component: pinned_version(component) for component in COMPONENTS}


@dataclass(frozen=True, slots=True)
class Binaries:
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    etcd: Path
    kwok: Path

    def all(self) -> dict[str, Path]:
        return {
            "kube-apiserver": self.kube_apiserver,
            "kube-controller-manager": self.kube_controller_manager,
            "kube-scheduler": self.kube_scheduler,
            "kubectl": self.kubectl,
            "etcd": self.etcd,
            "kwok": self.kwok,
        }


def find_binaries() -> Binaries:
    """The pinned binaries, or BinaryNotFoundError saying how to build them.

    $GPUSCHED_BIN_DIR, when set, is one directory holding all six binaries (e.g. a CI cache
    or binaries built some other way); otherwise the version-keyed cache of build.sh.
    """
    override = os.environ.get("GPUSCHED_BIN_DIR")
    found: dict[str, Path] = {}
    missing: list[str] = []
    for component, (_, names) in COMPONENTS.items():
        if override:
            where = Path(override)
        else:
            where = cache_dir() / "bin" / f"{component}-{pinned_version(component)}"
        absent = [
            n for n in names if not (where / n).is_file() or not os.access(where / n, os.X_OK)
        ]
        found.update({n: where / n for n in names if n not in absent})
        if absent:
            missing.append(f"{', '.join(absent)} in {where}")
    if missing:
        where_from = "$GPUSCHED_BIN_DIR" if override else "the build cache"
        raise BinaryNotFoundError(
            f"control-plane binaries missing from {where_from}: {'; '.join(missing)}. "
            "Run `make bins` (tools/build.sh: needs Go >= 1.26 and the Go module proxy; the "
            "first build takes several minutes, later runs reuse the cache)."
        )
    return Binaries(
        kube_apiserver=found["kube-apiserver"],
        kube_controller_manager=found["kube-controller-manager"],
        kube_scheduler=found["kube-scheduler"],
        kubectl=found["kubectl"],
        etcd=found["etcd"],
        kwok=found["kwok"],
    )
