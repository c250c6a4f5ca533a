"""Logs (structlog JSON, one decision record per attempt), metrics and the health server."""
