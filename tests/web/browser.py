"""Debian's Chromium, headless, driven by Selenium through Debian's chromedriver (nothing is downloaded)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL_HINT = "run scripts/install-test-tools.sh (apt-get installs chromium, chromium-driver and prometheus)"

# Root needs --no-sandbox; the rest keeps Chromium from reaching out to the network in the background, which a closed
# machine refuses and which would show up as noise or delays.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-default-apps", "--disable-dev-shm-usage", "--window-size=1400,1800"]


def missing_tools() -> list[str]:
    return [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """A fresh headless Chromium with its own profile folder; the browser's console is kept for get_log("browser")."""
    profile = tempfile.mkdtemp(prefix="caovan-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(driver: webdriver.Chrome) -> list[str]:
    """The console's errors since the last call (reading the log empties it)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
