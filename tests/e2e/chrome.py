"""Headless Debian Chromium for the browser tests, through Selenium with Debian's chromedriver.

Nothing is downloaded: Selenium Manager is kept offline. A module that imports this is
skipped where Chromium or chromedriver is absent, and fails in CI (``.ci/run`` installs both).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("RAGLINE_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("RAGLINE_CHROMEDRIVER", "/usr/bin/chromedriver"))

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    missing = f"needs {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)"
    if os.environ.get("CI"):  # .ci/run installs them: a CI without them is broken, not skipped
        pytest.fail(missing, pytrace=False)
    pytest.skip(missing, allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402


@contextmanager
def chrome(width: int = 1280, height: int = 900) -> Iterator[WebDriver]:
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not download anything
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
