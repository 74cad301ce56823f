"""The console in headless Chromium: sign in with the form, filter runs, read a trace, a case and the pending actions.

The server runs on this test's event loop; the browser is driven from a worker thread so the loop keeps
answering it. Screenshots of the overview and a trace are kept among the test artefacts (``browser.artifacts``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import Select

from adapters.web.auth import COOKIE
from tests.adapters.web import browser, scenario
from tests.adapters.web.conftest import SECRET
from tests.adapters.web.scenario import ALICE, Finds
from tests.fakes.openai_server import FakeOpenAI

# The pages, not the store, are under test here (the other console tests cover both databases): SQLite only.
pytestmark = [pytest.mark.asyncio, pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]
GYM = "does the company pay for my gym?"
PARKING = "is parking at the airport covered?"
NOT_COVERED = "not_covered"

Browsers = Callable[..., Chrome]


@dataclass(frozen=True)
class Console:
    url: str
    case_id: str  # a case opened from the gym conversation


@pytest.fixture
def browsers(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browsers]:
    """Headless Chromium on demand (``javascript=False``: scripts blocked); skipped where none is installed."""
    why = browser.missing()
    if why:
        pytest.skip(why)
    monkeypatch.setenv("SE_OFFLINE", "true")  # belt and braces: explicit paths already keep Selenium Manager out
    started: list[Chrome] = []

    def start(*, javascript: bool = True) -> Chrome:
        started.append(browser.chromium(javascript=javascript))
        return started[-1]

    yield start
    for driver in started:
        driver.quit()


@pytest_asyncio.fixture
async def console(start_console: Any, fake_openai: FakeOpenAI) -> Console:
    """Five runs made by the service (two not covered, one with a card) and a case opened after the gym question."""
    started = await start_console(Finds())
    svc = started.service
    await scenario.answered(svc, fake_openai)
    gym = await scenario.not_covered(svc, fake_openai, GYM)
    await scenario.not_covered(svc, fake_openai, PARKING)
    await scenario.repeated(svc, fake_openai)
    await scenario.ticket(svc, fake_openai)
    case = await svc.request_handoff(gym.conversation_key, ALICE)
    return Console(started.url, case.case_id)


async def test_an_operator_signs_in_filters_runs_and_reads_a_trace_a_case_and_pending_actions(
    browsers: Browsers, console: Console, capsys: pytest.CaptureFixture[str]
) -> None:
    shots = await asyncio.to_thread(_operate, browsers(), console)
    with capsys.disabled():
        print("\nconsole screenshots: " + ", ".join(str(path) for path in shots))
    assert all(path.stat().st_size > 0 for path in shots)


async def test_without_javascript_an_operator_signs_in_filters_runs_with_the_button_and_reads_a_trace(
    browsers: Browsers, console: Console
) -> None:
    await asyncio.to_thread(_read_without_scripts, browsers(javascript=False), console)


def _operate(driver: Chrome, console: Console) -> list[Path]:
    """The whole walk with scripts on: htmx filters in place; the screenshots it took."""
    _sign_in(driver, console.url)
    assert driver.find_element(By.ID, "runs-total").text == "5"
    chart = driver.find_element(By.CSS_SELECTOR, "svg.chart")
    assert chart.size["height"] > 0 and len(chart.find_elements(By.TAG_NAME, "rect")) >= 3  # one per ending today
    shots = [browser.screenshot(driver, "console-overview")]
    _nav(driver, "Runs")
    assert driver.execute_script("return typeof window.htmx") == "object"  # the vendored script loaded
    assert len(_rows(driver)) == 5
    _filter_in_place(driver)
    _open_trace(driver, GYM)
    shots.append(browser.screenshot(driver, "console-trace"))
    _read_case(driver, console.case_id)
    _read_pending_actions(driver)
    refused = [message for message in browser.console_messages(driver) if "Content Security Policy" in message]
    assert not refused, refused
    return shots


def _read_without_scripts(driver: WebDriver, console: Console) -> None:
    _sign_in(driver, console.url)
    _nav(driver, "Runs")
    assert driver.execute_script("return typeof window.htmx") == "undefined"  # scripts really are off
    listed = driver.find_element(By.ID, "runs")
    Select(driver.find_element(By.NAME, "reason")).select_by_visible_text(NOT_COVERED)
    driver.find_element(By.CSS_SELECTOR, "#run-filters button[type=submit]").click()
    browser.wait_for(driver, seen.staleness_of(listed), "the Filter button loaded no new page")
    assert "reason=not_covered" in driver.current_url
    assert sorted(_rows(driver)) == [(NOT_COVERED, GYM), (NOT_COVERED, PARKING)]
    _open_trace(driver, GYM)


def _sign_in(driver: WebDriver, url: str) -> None:
    """Sign in through the form; the browser then holds the session cookie (it can send no bearer header)."""
    driver.get(url + "/console/")
    driver.find_element(By.ID, "secret").send_keys(SECRET)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    overview = seen.presence_of_element_located((By.ID, "runs-total"))
    browser.wait_for(driver, overview, "sign-in did not open the overview")
    cookie = driver.get_cookie(COOKIE)
    assert cookie is not None and cookie["httpOnly"] and cookie.get("sameSite") == "Strict"


def _nav(driver: WebDriver, label: str) -> None:
    driver.find_element(By.CSS_SELECTOR, "header nav").find_element(By.LINK_TEXT, label).click()
    here = (By.CSS_SELECTOR, 'header nav a[aria-current="page"]')
    browser.wait_for(driver, seen.text_to_be_present_in_element(here, label), f"the nav did not open {label}")


def _rows(driver: WebDriver) -> list[tuple[str, str]]:
    """(reason, question) of each run listed."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#run-rows tr.run")
    return [(_cell(row, "reason"), _cell(row, "question")) for row in rows]


def _cell(row: WebElement, kind: str) -> str:
    return row.find_element(By.CSS_SELECTOR, f"td.{kind}").text


def _filter_in_place(driver: WebDriver) -> None:
    """Choosing a reason is enough: htmx swaps the list in this same page and puts the filter in the address."""
    listed = driver.find_element(By.ID, "runs")
    driver.execute_script("window.sameDocument = true")
    Select(driver.find_element(By.NAME, "reason")).select_by_visible_text(NOT_COVERED)
    browser.wait_for(driver, seen.staleness_of(listed), "choosing a reason did not update the runs")
    browser.wait_for(driver, seen.url_contains("reason=not_covered"), "the filter is not in the address")
    assert driver.execute_script("return window.sameDocument") is True  # swapped in place, not reloaded
    assert sorted(_rows(driver)) == [(NOT_COVERED, GYM), (NOT_COVERED, PARKING)]


def _open_trace(driver: WebDriver, question: str) -> None:
    """Click the run that asked ``question``; its steps show the search the model made."""
    row = driver.find_element(By.XPATH, f'//tbody[@id="run-rows"]/tr[td[@class="question"]="{question}"]')
    row.find_element(By.CSS_SELECTOR, "td a").click()
    steps = browser.wait_for(driver, seen.presence_of_element_located((By.ID, "steps")), "no trace opened")
    assert driver.find_element(By.ID, "run-reason").text == NOT_COVERED
    tools = steps.find_elements(By.CSS_SELECTOR, "li.step.tool")
    called = [tool.find_element(By.CSS_SELECTOR, ".head").text.split()[:2] for tool in tools]
    assert called == [["tool", "search_policies"]]
    assert "gym membership" in tools[0].find_element(By.TAG_NAME, "pre").text


def _read_case(driver: WebDriver, case_id: str) -> None:
    _nav(driver, "Helpdesk")
    driver.find_element(By.ID, "cases").find_element(By.LINK_TEXT, case_id).click()
    transcript = browser.wait_for(driver, seen.presence_of_element_located((By.ID, "transcript")), "no case opened")
    assert GYM in transcript.text and case_id in driver.find_element(By.TAG_NAME, "h1").text


def _read_pending_actions(driver: WebDriver) -> None:
    _nav(driver, "Pending actions")
    rows = driver.find_elements(By.CSS_SELECTOR, "#actions tr.action")
    listed = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")] for row in rows]
    assert [(cells[1], cells[2]) for cells in listed] == [("open", "create_it_ticket")]
    assert "VPN keeps dropping" in listed[0][3]
