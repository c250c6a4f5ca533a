"""`gpusched agent`: this node's GPU inventory from NVML, published as the node annotation
gpusched.io/gpu-inventory (docs/telemetry-agent.md). Runs as a DaemonSet
(manifests/agent/); the scheduler reads the annotation in gpusched/model/node.py."""
