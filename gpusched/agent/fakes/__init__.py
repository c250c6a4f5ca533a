"""Fake NVML modules for tests: real machines' layouts behind pynvml's names.

Each layout module (dgx_a100, dgx_h100, pcie_rtx3090_pairs, pcie_rtx4090, gb200_tray) is
importable by name through GPUSCHED_NVML_MODULE (gpusched/agent/nvml.py, for tests only)
and quotes the `nvidia-smi topo -m` output it was built from. They live in the package
rather than under tests/ so that `gpusched agent` started as a subprocess (the integration
test, or by hand against `make cluster-up`'s KWOK nodes) imports them without a PYTHONPATH
that points into the source tree; nothing imports them unless that variable names one.
"""
