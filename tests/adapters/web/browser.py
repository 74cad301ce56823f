"""Headless Chromium for the console's browser test: Debian's chromium and chromedriver, never a download."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
MISSING = "no Chromium: apt-get install chromium chromium-driver"
ARTIFACTS_VAR = "POLICYPAL_TEST_ARTIFACTS"  # CI keeps this folder; kept by the clean-environment fixture
REPO = Path(__file__).resolve().parents[3]
WAIT_S = 15.0  # only a bound on a hang, never a measured duration
BLOCK_SCRIPTS = {"profile.managed_default_content_settings.javascript": 2}

T = TypeVar("T")


def missing() -> str | None:
    """Why the browser test cannot run here, or None when both binaries are installed."""
    found = all(path.is_file() and os.access(path, os.X_OK) for path in (CHROMIUM, CHROMEDRIVER))
    return None if found else MISSING


def chromium(*, javascript: bool = True) -> webdriver.Chrome:
    """A headless Chromium started from the explicit paths, so Selenium Manager never looks anything up."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(argument)
    if not javascript:
        options.add_experimental_option("prefs", BLOCK_SCRIPTS)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # what the console reports (CSP refusals)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(WAIT_S)
    return driver


def wait_for(driver: WebDriver, condition: Callable[[WebDriver], Literal[False] | T], message: str = "") -> T:
    """``condition``'s first truthy value; elements a swap replaced mid-check just mean "not yet"."""
    waiting: WebDriverWait[WebDriver] = WebDriverWait(
        driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)
    )
    return waiting.until(condition, message)


def console_messages(driver: webdriver.Chrome) -> list[str]:
    """What the page wrote to the browser console since last asked (CSP refusals land here)."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return [str(entry["message"]) for entry in entries]


def artifacts() -> Path:
    """Where screenshots go: ``$POLICYPAL_TEST_ARTIFACTS``, else ``<repo>/test-artifacts``."""
    folder = Path(os.environ.get(ARTIFACTS_VAR) or REPO / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def screenshot(driver: webdriver.Chrome, name: str) -> Path:
    """The whole page, below the fold included, saved as ``name``.png among the test artefacts."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    path = artifacts() / f"{name}.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    return path
