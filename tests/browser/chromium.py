"""How the browser tests (and scripts/screenshots.py) launch Debian's Chromium, headless: a
module of its own, importable without Django."""

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
