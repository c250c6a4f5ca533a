"""The assume cache: volumes and claims as Reserve promised them, until the watch catches up.

kube-scheduler's PV and PVC assume caches: Reserve records "this volume is now bound to
that claim" (its claimRef set) and "this claim is to be provisioned on that node" (its
selected-node annotation) before any API write, so the next pod's cycle does not pick the
same volume. An assumed object is read instead of the watched one for as long as the watch
still shows the version it was assumed from; once the watch delivers any other version (our
write, or someone else's) or the object is gone, the watched one wins and the assumption is
dropped. Unreserve restores an object only if the assumption is still the one it made.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpusched.framework.volumes import VolumePort
from gpusched.model.volume import Claim, PersistentVolume


class AssumeCache:
    def __init__(self, port: VolumePort) -> None:
        self.port = port
        # name -> (assumed volume, resourceVersion it was assumed from)
        self._volumes: dict[str, tuple[PersistentVolume, str]] = {}
        # namespace/name -> (assumed claim, resourceVersion it was assumed from)
        self._claims: dict[str, tuple[Claim, str]] = {}

    def __len__(self) -> int:
        return len(self._volumes) + len(self._claims)

    # -- reads ------------------------------------------------------------------------------

    def _volume_view(self, api: PersistentVolume) -> PersistentVolume:
        got = self._volumes.get(api.name)
        if got is None:
            return api
        if api.resource_version != got[1]:
            del self._volumes[api.name]
            return api
        return got[0]

    def volume(self, name: str) -> PersistentVolume | None:
        api = self.port.volume(name)
        if api is None:
            self._volumes.pop(name, None)
            return None
        return self._volume_view(api)

    def volumes_of_class(self, storage_class: str) -> Iterator[PersistentVolume]:
        for api in self.port.volumes_of_class(storage_class):
            yield self._volume_view(api)

    def claim(self, namespace: str, name: str) -> Claim | None:
        api = self.port.claim(namespace, name)
        key = f"{namespace}/{name}"
        got = self._claims.get(key)
        if api is None:
            self._claims.pop(key, None)
            return None
        if got is None:
            return api
        if api.resource_version != got[1]:
            del self._claims[key]
            return api
        return got[0]

    # -- assume / restore -------------------------------------------------------------------

    def assume_volume(self, assumed: PersistentVolume, base_version: str) -> None:
        self._volumes[assumed.name] = (assumed, base_version)

    def assume_claim(self, assumed: Claim, base_version: str) -> None:
        self._claims[assumed.key] = (assumed, base_version)

    def restore_volume(self, assumed: PersistentVolume) -> None:
        got = self._volumes.get(assumed.name)
        if got is not None and got[0] is assumed:
            del self._volumes[assumed.name]

    def restore_claim(self, assumed: Claim) -> None:
        got = self._claims.get(assumed.key)
        if got is not None and got[0] is assumed:
            del self._claims[assumed.key]
