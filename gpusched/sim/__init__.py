"""Trace-driven scheduling simulation: trace loading, workload construction, replay."""
