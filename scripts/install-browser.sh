#!/bin/sh
# Install what the dashboard's browser tests need: Debian's Chromium and Playwright for
# Python (which drives that Chromium; no browser is downloaded by Playwright).
set -eu
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends chromium
fi
"$PYTHON" -m pip install --quiet "playwright>=1.45"
chromium --version
