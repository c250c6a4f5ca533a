"""The scheduler core: cache and snapshot, queue, runtime, and the cycle wiring."""
