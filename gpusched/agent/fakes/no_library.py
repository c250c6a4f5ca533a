"""nvmlInit fails with NVML_ERROR_LIBRARY_NOT_FOUND: libnvidia-ml.so.1 is not in the
container (no NVIDIA container runtime, or the driver is not installed yet)."""

from gpusched.agent.fakes._fake import NVML_ERROR_LIBRARY_NOT_FOUND, FakeNvml

FAKE = FakeNvml((), init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
globals().update(FAKE.namespace())
