"""The one place the NVML bindings are imported.

Production imports `pynvml` from the nvidia-ml-py package (NVIDIA's own bindings, a thin
ctypes layer over libnvidia-ml.so.1 that the NVIDIA container runtime mounts into the
pod). For tests only, GPUSCHED_NVML_MODULE=<package.module> names a module to import
instead, with pynvml's function names, error class and constants
(gpusched/agent/fakes/); a production DaemonSet never sets it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from types import ModuleType

ENV = "GPUSCHED_NVML_MODULE"
DEFAULT_MODULE = "pynvml"


class NvmlLoadError(Exception):
    """The bindings could not be imported; the message says which module and why."""


def module_name(environ: Mapping[str, str] = os.environ) -> str:
    return environ.get(ENV, "").strip() or DEFAULT_MODULE


def load_nvml(environ: Mapping[str, str] = os.environ) -> ModuleType:
    """The NVML module: pynvml, or the test module GPUSCHED_NVML_MODULE names."""
    name = module_name(environ)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if name == DEFAULT_MODULE:
            raise NvmlLoadError(
                "cannot import pynvml: install the nvidia-ml-py package"
                f" (pip install nvidia-ml-py) ({exc})"
            ) from exc
        raise NvmlLoadError(
            f"{ENV}={name!r}: cannot import that module ({exc}); it is for tests only,"
            " unset it to use pynvml"
        ) from exc
