"""Live GPU telemetry: DCGM exporter metrics read through Prometheus (reader) and turned
into the snapshot's per-card columns (ingest), for the daemon and the simulator alike."""
