"""NVML loads and initialises but sees no GPU: what a container without the NVIDIA runtime's
device injection (NVIDIA_VISIBLE_DEVICES unset) sees on a GPU node."""

from gpusched.agent.fakes._fake import FakeNvml

FAKE = FakeNvml(())
globals().update(FAKE.namespace())
