"""`make soak-faults`: a pytest plugin (`-p tests.integration.soak_summary`) that prints one
line per fault scenario at the end: what ran, how much, how long, and PASS or FAIL. The
scenarios report through `record_property("soak", ...)`."""

from __future__ import annotations

import pytest

_lines: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" and not (report.failed and report.when == "setup"):
        return
    said = [str(value) for name, value in report.user_properties if name == "soak"]
    if report.passed and said:
        _lines.extend(f"PASS  {line}" for line in said)
    elif report.failed:
        why = report.longreprtext.strip().splitlines()
        _lines.append(f"FAIL  {report.nodeid}: {why[-1] if why else ''}"[:300])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.section("fault soak")
    for line in _lines or ["no fault scenario ran"]:
        terminalreporter.write_line(line)
