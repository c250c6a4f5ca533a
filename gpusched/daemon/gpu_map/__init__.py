"""The GPU map (`gpusched run --gpu-map`, docs/gpu-map.md): a read-only page on the metrics
port showing nodes x cards coloured by use, share and temperature, the pending pods with
their latest FailedScheduling message, the gangs and the quotas.

    view.py     the data (plain frozen dataclasses) and the colouring rules: pure
    render.py   data -> HTML (self-contained, every cluster string escaped) and JSON: pure
    collect.py  the daemon's cache, queue, boards and quotas -> data, read without writing
    routes.py   GET /map and /map.json, and the pending reasons heard from the Reporter
"""

from gpusched.daemon.gpu_map.routes import map_routes

__all__ = ["map_routes"]
