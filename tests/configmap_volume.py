"""A ConfigMap volume as the kubelet writes it, for the hot-reload tests.

The kubelet's atomic writer (pkg/volume/util/atomic_writer.go) never edits a projected
file in place: each update writes the files into a new directory `..<UTC timestamp>.<rand>`,
points a new symlink `..data_tmp` at it, renames that over `..data` (one atomic rename),
creates the user-visible `KEY -> ..data/KEY` symlinks once, and removes the old
directory. A watch on the file's inode never sees the change; the daemon's poll does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path


class ConfigMapVolume:
    def __init__(self, root: Path, key: str = "config.yaml") -> None:
        self.root = root
        self.key = key
        root.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path:
        """What the container is given: `--config <mount>/<key>`."""
        return self.root / self.key

    def write(self, text: str) -> None:
        """One kubelet update: a new timestamped directory swapped in under `..data`."""
        data = self.root / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        new = Path(tempfile.mkdtemp(prefix=stamp, dir=self.root))
        (new / self.key).write_text(text)
        new.chmod(0o755)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(new.name)
        tmp.rename(data)
        if not self.path.is_symlink():
            self.path.symlink_to(f"..data/{self.key}")
        if old is not None:
            shutil.rmtree(self.root / old)

    def remove_key(self) -> None:
        """The key deleted from the ConfigMap: the kubelet drops it from the new directory
        (the user-visible symlink then dangles until it is cleaned up)."""
        data = self.root / "..data"
        old = os.readlink(data)
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        new = Path(tempfile.mkdtemp(prefix=stamp, dir=self.root))
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(new.name)
        tmp.rename(data)
        shutil.rmtree(self.root / old)
