"""Debian's Chromium, headless, driven by Selenium through Debian's chromedriver (nothing is downloaded)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

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


# The dashboard's parts, for the tests that read it ---------------------------------------------------------------

def text(driver: webdriver.Chrome, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def wait(driver: webdriver.Chrome, timeout_s: float, condition: Callable[[], object], what: str) -> object:
    # A stale element is one the page replaced while it was read (the Models card re-renders its rows): try again.
    return WebDriverWait(driver, timeout_s, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException]
                         ).until(lambda _: condition(), message=f"{what} (waited {timeout_s} s)")


def admin_confirm(driver: webdriver.Chrome, button: str, heading: str, key: str) -> None:
    """Press the button (a CSS selector, found again if the page replaced it meanwhile), then answer the dialog."""
    wait(driver, 5, lambda: driver.find_element(By.CSS_SELECTOR, button).click() or True, f"{button} not pressed")
    wait(driver, 5, lambda: driver.find_element(By.ID, "admin-dialog").get_attribute("open") is not None,
         "the confirmation dialog did not open")
    assert heading in text(driver, "admin-title")
    field = driver.find_element(By.ID, "admin-key")
    field.clear()
    field.send_keys(key)
    driver.find_element(By.ID, "admin-confirm").click()


def model_row(driver: webdriver.Chrome, name: str) -> dict:
    """A row of the Models card, read in one go (the card re-renders its rows with each /status): the texts of its
    cells before the buttons, and which of its buttons can be pressed."""
    return driver.execute_script("""
        const row = document.querySelector(`#models tr[data-model="${arguments[0]}"]`);
        const enabled = (action) => !row.querySelector(`button[data-action="${action}"]`).disabled;
        return {cells: [...row.cells].slice(0, 6).map((cell) => cell.textContent),
                load: enabled("load"), unload: enabled("unload")};
    """, name)


def model_view(driver: webdriver.Chrome, name: str) -> dict:
    row = model_row(driver, name)
    return {"state": row["cells"][2], "load": row["load"], "unload": row["unload"]}


def admin_model(driver: webdriver.Chrome, name: str, action: str, key: str) -> None:
    admin_confirm(driver, f'#models tr[data-model="{name}"] button[data-action="{action}"]',
                  f"{action.capitalize()} {name}?", key)
