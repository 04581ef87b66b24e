"""A real headless Chromium (Debian's package) driven by Playwright; screenshots go to artifacts/."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("TICKWARDEN_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"  # gitignored; kept by CI as the test artefacts
SAVED: list[Path] = []


@pytest.fixture(scope="session")
def chromium():
    # Fail loudly: a missing browser must never turn into silently skipped tests.
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.fail(f"Chromium not found at {CHROMIUM}: run scripts/install-browser.sh first.")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright for Python is not installed: run scripts/install-browser.sh first.")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


@pytest.fixture
def shot(request):
    """Save a full-page screenshot named after the test and a label."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def take(page, label: str) -> Path:
        path = ARTIFACTS / f"{request.node.name}-{label}.png"
        page.screenshot(path=str(path), full_page=True)
        SAVED.append(path)
        print(f"screenshot: {path}")
        return path

    return take


def pytest_terminal_summary(terminalreporter):
    """List every screenshot this session saved, so a run's artefacts can be found."""
    if SAVED:
        terminalreporter.section("dashboard screenshots")
        for path in SAVED:
            terminalreporter.write_line(str(path))
