"""``/docs`` in headless Chromium: Swagger UI reads the OpenAPI 3.1 document the API emits and
draws every operation, offline.

Before issue 23 the bundled Swagger UI 4.15.5 answered 200 for the page and every asset and
drew only "Unable to render this definition": a status-code check passed, the page was empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from core.settings import Settings
from testkit.server import app_in_thread
from tests.e2e.chrome import WebDriver, chrome

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.browser]

from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

WAIT_S = 60.0


@pytest.fixture(scope="module")
def base_url(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API with its foundation services only (no model, no index): /docs needs neither."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("docs-data"), database_url=pg_url)
    with app_in_thread(create_app(settings, hooks=[])) as url:
        yield url


@pytest.fixture(scope="module")
def browser(base_url: str) -> Iterator[WebDriver]:
    with chrome() as driver:
        yield driver


def _operations(base_url: str) -> list[tuple[str, str]]:
    doc = httpx.get(f"{base_url}/openapi.json", timeout=30).json()
    assert doc["openapi"].startswith("3.1"), doc["openapi"]
    methods = {"get", "put", "post", "delete", "patch", "options", "head"}
    return sorted((m.upper(), path) for path, ops in doc["paths"].items() for m in ops if m in methods)


def test_docs_draws_every_operation(browser: WebDriver, base_url: str, tmp_path: Path) -> None:
    expected = _operations(base_url)
    assert len(expected) > 20
    browser.get(f"{base_url}/docs")
    try:
        WebDriverWait(browser, WAIT_S).until(
            lambda d: (
                len(d.find_elements(By.CSS_SELECTOR, ".opblock")) >= len(expected)
                or d.find_elements(By.CSS_SELECTOR, ".errors-wrapper, .loading-container .errors")
            )
        )
    except TimeoutException:
        browser.save_screenshot(str(tmp_path / "docs.png"))
        raise AssertionError(
            f"Swagger UI drew no operations (screenshot {tmp_path / 'docs.png'}):\n"
            + browser.find_element(By.TAG_NAME, "body").text[:2000]
        ) from None
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Unable to render this definition" not in body, body[:2000]
    assert not browser.find_elements(By.CSS_SELECTOR, ".errors-wrapper"), body[:2000]
    drawn = sorted(
        (
            block.find_element(By.CSS_SELECTOR, ".opblock-summary-method").text.strip(),
            block.find_element(By.CSS_SELECTOR, ".opblock-summary-path").get_attribute("data-path") or "",
        )
        for block in browser.find_elements(By.CSS_SELECTOR, ".opblock")
    )
    assert drawn == expected
    assert "OAS 3.1" in browser.find_element(By.CSS_SELECTOR, ".info .version-stamp").text
    # "Authorize" knows the bearer scheme
    assert browser.find_elements(By.CSS_SELECTOR, "button.authorize")


def test_an_operation_opens_with_its_schema(browser: WebDriver, base_url: str) -> None:
    browser.get(f"{base_url}/docs")
    summary = WebDriverWait(browser, WAIT_S).until(
        lambda d: next(
            (
                s
                for s in d.find_elements(By.CSS_SELECTOR, ".opblock-summary")
                if s.find_elements(By.CSS_SELECTOR, '[data-path="/v1/retrieve"]')
            ),
            None,
        )
    )
    assert summary is not None
    summary.click()
    WebDriverWait(browser, WAIT_S).until(
        lambda d: "top_k" in d.find_element(By.CSS_SELECTOR, ".opblock.is-open").text
    )
    # nothing came from outside this origin
    urls = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    # data: URLs (Swagger UI's inline SVG icons; newer Chromium lists them) fetch nothing
    fetched = [u for u in urls if not u.startswith("data:")]
    assert fetched and all(u.startswith(base_url) for u in fetched), urls
