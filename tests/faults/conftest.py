"""The fault suite's figures, printed last so that a program can read them."""

from __future__ import annotations

from tests.faults.cluster import Figures

RESULTS: list[Figures] = []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not RESULTS:
        return
    terminalreporter.section("fault suite")
    for figures in RESULTS:
        for note in figures.notes[:20]:
            terminalreporter.write_line(f"  {figures.name}: {note}")
    for figures in RESULTS:
        terminalreporter.write_line(figures.line())
