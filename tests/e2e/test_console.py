"""The operator console in headless Chromium against a real server (uvicorn on a thread,
real PostgreSQL, the real embedding model): sign in, search as two principals, "why not?",
judge a result and set the tenant's fusion, upload files and follow each to its outcome,
watch an ingest job, swap and roll back an index version, create a key.

One server and one browser serve the whole module; screenshots of every page are saved
under a temp dir whose path is printed. Skipped when chromium or chromedriver is absent
(CI installs Debian's ``chromium`` and ``chromium-driver``).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import psycopg
import pytest

from api.app import ServiceHook, create_app
from api.services import ingest_hook, search_hook
from authz.api_keys import create_key
from catalog import jobs as jobs_repo
from catalog import principals as principals_repo
from core.settings import Settings
from jobs.rebuild_job import rebuild
from testkit.server import app_in_thread
from tests import factories, hostile_office
from tests.conftest import truncate_all
from tests.unit.ingest import office_factory

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.browser]

CHROMIUM = Path(os.environ.get("RAGLINE_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("RAGLINE_CHROMEDRIVER", "/usr/bin/chromedriver"))
PAY = "Salary bands and compensation ranges for every engineering level are reviewed each spring."
OFFICE = "The office opens at eight and the kitchen is restocked on Mondays."
WAIT_S = 60.0

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    missing = f"needs {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)"
    if os.environ.get("CI"):  # .ci/run installs them: a CI without them is broken, not skipped
        pytest.fail(missing, pytrace=False)
    pytest.skip(missing, allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Console:
    base_url: str
    keys: dict[str, str]
    db_url: str
    index_root: Path
    shots: Path

    def api(self, method: str, path: str, key: str, **kwargs: object) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.keys[key]}"}
        return httpx.request(method, self.base_url + path, headers=headers, timeout=60, **kwargs)  # type: ignore[arg-type]

    def wait_job(self, job_id: str) -> dict:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            job = self.api("GET", f"/v1/jobs/{job_id}", "ingest").json()
            if job["state"] not in ("queued", "running"):
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} did not finish")


def _no_ray_ingest(app, settings, *, embedder):
    close = ingest_hook(app, settings, embedder=embedder)
    app.state.runner.config = dataclasses.replace(app.state.runner.config, use_ray=False)
    return close


@pytest.fixture(scope="module")
def console(pg_url: str, embedder, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    truncate_all(pg_url)
    data = tmp_path_factory.mktemp("console-data")
    # Outside pytest's rotating basetemp, so a reviewer finds them after the run.
    shots = Path(os.environ.get("RAGLINE_SCREENSHOTS") or tempfile.mkdtemp(prefix="ragline-console-shots-"))
    shots.mkdir(parents=True, exist_ok=True)
    print(f"\nconsole screenshots: {shots}")
    settings = Settings(data_dir=data, database_url=pg_url)
    hooks: list[ServiceHook] = [
        partial(_no_ray_ingest, embedder=embedder),
        partial(search_hook, embedder=embedder),
    ]
    with app_in_thread(create_app(settings, hooks=hooks), start_timeout_s=120) as url:
        with psycopg.connect(pg_url) as conn:
            keys = {
                "admin": create_key(
                    conn, tenant_id="acme", roles=["admin", "operator"], principal_id="user:root"
                ).token,
                "ingest": create_key(conn, tenant_id="acme", roles=["ingest"]).token,
                "tenant_admin": create_key(
                    conn, tenant_id="acme", roles=["admin"], principal_id="user:ta"
                ).token,
            }
            principals_repo.replace_groups(
                conn, tenant_id="acme", principal_id="user:alice", groups=["group:hr"]
            )
            principals_repo.replace_groups(
                conn, tenant_id="acme", principal_id="user:bob", groups=["group:eng"]
            )
        c = Console(url, keys, pg_url, data / "indexes", shots)
        docs = [
            {"external_id": "pay", "text": PAY, "acl": {"principals": ["group:hr"]}},
            {"external_id": "office", "text": OFFICE, "acl": {"public": True}},
        ]
        job = c.api("POST", "/v1/documents", "ingest", json={"documents": docs}).json()
        assert c.wait_job(job["job_id"])["state"] == "succeeded"
        yield c


@pytest.fixture(scope="module")
def browser(console: Console) -> Iterator[WebDriver]:
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not download anything
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_window_size(1280, 900)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: WebDriver, condition, timeout: float = WAIT_S):
    return WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(
        condition
    )


def _shot(driver: WebDriver, console: Console, name: str) -> None:
    """The whole page (the window grown to its height for the shot), at the current width."""
    width, height = driver.get_window_size()["width"], driver.get_window_size()["height"]
    full = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(height, full + 140), 4000))
    driver.save_screenshot(str(console.shots / f"{name}.png"))
    driver.set_window_size(width, height)


def _fill(driver: WebDriver, element_id: str, value: str) -> None:
    box = driver.find_element(By.ID, element_id)
    box.clear()
    box.send_keys(value)


def test_sign_in(browser: WebDriver, console: Console) -> None:
    headers = httpx.get(console.base_url + "/console/").headers
    assert (
        "default-src 'self'" in headers["content-security-policy"]
        and "unsafe-inline" not in headers["content-security-policy"]
    )
    browser.get(console.base_url + "/console")
    assert browser.current_url.endswith("/console/")
    _fill(browser, "signin-key", "rl_bogus_key")
    browser.find_element(By.CSS_SELECTOR, "#signin-form button").click()
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "signin-error"), "API key"))
    _fill(browser, "signin-key", console.keys["admin"])
    browser.find_element(By.ID, "signin-key").send_keys(Keys.ENTER)  # keyboard submit
    _wait(browser, ec.visibility_of_element_located((By.ID, "nav")))
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.page") == "search")
    assert not browser.find_element(By.ID, "page-signin").is_displayed()
    assert browser.execute_script("return document.cookie") == ""
    # the key, and the roles /v1/me reported (which pages to show; not a secret)
    assert browser.execute_script("return sessionStorage.length") == 2
    assert (
        browser.execute_script("return sessionStorage.getItem('ragline.console.roles')") == "admin,operator"
    )


def _search_as(browser: WebDriver, principal: str) -> None:
    browser.get(browser.current_url.split("#")[0] + "#search")
    _fill(browser, "q", "salary compensation bands")
    _fill(browser, "as-principal", principal)
    browser.find_element(By.CSS_SELECTOR, "#search-form button[type=submit]").click()
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "result-principal"), principal))


def test_search_as_two_principals(browser: WebDriver, console: Console) -> None:
    _search_as(browser, "user:alice")
    assert "group:hr" in browser.find_element(By.ID, "as-groups").text
    rows = browser.find_elements(By.CSS_SELECTOR, "table.results tbody tr")
    assert rows[0].get_attribute("data-external-id") == "pay"
    assert PAY in browser.find_element(By.ID, "context-text").text  # the packed context
    assert browser.find_elements(By.CSS_SELECTOR, "#context-text mark.cite")
    _shot(browser, console, "search-1280")
    browser.set_window_size(390, 844)
    time.sleep(0.3)
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
    _shot(browser, console, "search-390")
    browser.set_window_size(1280, 900)
    # bob may not read "pay": it is in no list, and its text is nowhere in the DOM
    _search_as(browser, "user:bob")
    ids = [
        r.get_attribute("data-external-id")
        for r in browser.find_elements(By.CSS_SELECTOR, "table.results tr[data-external-id]")
    ]
    assert "pay" not in ids and "office" in ids
    # no index version yet: the delta answered, and the page says so
    assert "no index version yet" in browser.find_element(By.ID, "plans-hint").text
    dom = browser.execute_script("return document.documentElement.outerHTML")
    assert PAY not in dom and "Salary bands" not in dom
    _shot(browser, console, "search-as-bob")


def test_why_not_for_a_hidden_document(browser: WebDriver, console: Console) -> None:
    browser.get(browser.current_url.split("#")[0] + "#explain")
    _fill(browser, "x-external", "pay")
    _fill(browser, "x-principal", "user:bob")
    _fill(browser, "x-query", "salary bands")
    browser.find_element(By.CSS_SELECTOR, "#explain-form button[type=submit]").click()
    reason = _wait(browser, ec.visibility_of_element_located((By.CSS_SELECTOR, "#explain-reasons li")))
    assert reason.get_attribute("data-reason") == "not_in_acl"
    assert "Hidden from user:bob" in browser.find_element(By.ID, "explain-verdict").text
    assert "group:hr" in browser.find_element(By.ID, "explain-out").text
    assert PAY not in browser.execute_script("return document.documentElement.outerHTML")
    _shot(browser, console, "why-not")


def test_judge_a_result_and_set_the_tenant_fusion(browser: WebDriver, console: Console) -> None:
    """Relevance feedback from the playground is recorded as the principal searched as; the
    tenant's fusion defaults are shown, set and reset from the page, and a search names the
    fusion it used."""
    _search_as(browser, "user:alice")
    assert browser.find_element(By.ID, "result-fusion").text.startswith("rrf k=60")
    top = browser.find_element(By.CSS_SELECTOR, "table.results tbody tr")
    chunk_id = top.get_attribute("data-chunk-id")
    top.find_element(By.CSS_SELECTOR, "button[data-judge='relevant']").click()
    _wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "[data-judged='relevant']")))
    with psycopg.connect(console.db_url) as conn:
        judged = conn.execute(
            "SELECT principal_id, chunk_id, grade FROM feedback WHERE tenant_id = 'acme'"
        ).fetchall()
    assert judged == [("user:alice", chunk_id, 1)]

    browser.find_element(By.CSS_SELECTOR, "#fusion-box summary").click()
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "fusion-stored"), "none stored"))
    Select(browser.find_element(By.ID, "fu-method")).select_by_value("convex")
    _fill(browser, "fu-wd", "0.7")
    _fill(browser, "fu-wl", "0.3")
    browser.find_element(By.CSS_SELECTOR, "#fusion-form button[type=submit]").click()
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "fusion-effective"), "convex"))
    assert "dense 0.7, lexical 0.3" in browser.find_element(By.ID, "fusion-effective").text
    browser.find_element(By.CSS_SELECTOR, "#search-form button[type=submit]").click()
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "result-fusion"), "convex"))
    _shot(browser, console, "search-fusion")
    browser.find_element(By.ID, "fusion-reset").click()
    _wait(browser, ec.alert_is_present()).accept()
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "fusion-stored"), "none stored"))
    assert browser.find_element(By.ID, "fusion-effective").text.startswith("rrf k=60")


def _upload_rows(driver: WebDriver) -> dict[str, dict]:
    return driver.execute_script(
        "const out = {}; for (const r of document.querySelectorAll('#upload-out tr[data-file]'))"
        " out[r.dataset.file] = {outcome: r.dataset.outcome, code: r.dataset.code, id: r.dataset.externalId,"
        " detail: r.lastElementChild.textContent};"
        " return out;"
    )


def test_upload_office_files_with_their_outcomes(
    browser: WebDriver, console: Console, tmp_path: Path
) -> None:
    """Four files picked at once: a DOCX is indexed for its readers, an encrypted DOCX fails in
    its job as ``encrypted_document``, a ZIP is refused at the upload as ``unsupported_type``,
    an e-mail is indexed with its skipped attachment named; each row says so. A form with no
    readers is refused before anything is sent."""
    files = {
        "handbook.docx": office_factory.docx_bytes(rows=4),
        "locked.docx": hostile_office.encrypted(office_factory.docx_bytes()),
        "archive.zip": b"PK\x03\x04 not really an archive",
        "memo.eml": office_factory.eml_bytes(),  # its ZIP attachment is skipped, and said so
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    browser.get(browser.current_url.split("#")[0] + "#upload")
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.page") == "upload")
    picker = browser.find_element(By.ID, "u-files")
    picker.send_keys(str(tmp_path / "handbook.docx"))
    browser.find_element(By.CSS_SELECTOR, "#upload-form button[type=submit]").click()
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "upload-error"), "Name the readers"))
    assert not _upload_rows(browser)
    picker.clear()
    picker.send_keys("\n".join(str(tmp_path / name) for name in files))
    _fill(browser, "u-prefix", "share/")
    _fill(browser, "u-readers", "group:hr")
    _fill(browser, "u-meta", "team=people")
    browser.find_element(By.CSS_SELECTOR, "#upload-form button[type=submit]").click()
    final = {"indexed", "failed", "refused", "cancelled"}
    _wait(
        browser,
        lambda d: len(rows := _upload_rows(d)) == 4 and all(r["outcome"] in final for r in rows.values()),
    )
    rows = _upload_rows(browser)
    assert rows["handbook.docx"] == {
        "outcome": "indexed",
        "code": "",
        "id": "share/handbook.docx",
        "detail": "searchable",
    }
    assert rows["locked.docx"]["outcome"] == "failed" and rows["locked.docx"]["code"] == "encrypted_document"
    assert rows["archive.zip"]["outcome"] == "refused" and rows["archive.zip"]["code"] == "unsupported_type"
    assert rows["memo.eml"]["outcome"] == "indexed"
    assert "attachment_skipped" in rows["memo.eml"]["detail"]
    _shot(browser, console, "upload")
    rotation = office_factory.FACTS["rotation"]

    def found(principal: str) -> dict[str, dict]:
        body = {"query": rotation, "mode": "lexical", "as_principal": principal}
        out = console.api("POST", "/v1/admin/retrieve", "admin", json=body).json()
        return {r["document_external_id"]: r["metadata"] for r in out["results"]}

    assert found("user:alice")["share/handbook.docx"]["team"] == "people"  # group:hr reads it
    assert "share/handbook.docx" not in found("user:bob")


def _job_state(driver: WebDriver, job_id: str) -> str | None:
    """Read in the page's own JS: the table is re-rendered every second, so a Selenium element
    handle can go stale between finding and reading it."""
    return driver.execute_script(
        "const r = document.querySelector(`tr[data-job-id='${arguments[0]}']`); return r && r.dataset.state;",
        job_id,
    )


def _job_click(driver: WebDriver, job_id: str, action: str) -> bool:
    return bool(
        driver.execute_script(
            "const b = document.querySelector("
            "`tr[data-job-id='${arguments[0]}'] button[data-action='${arguments[1]}']`);"
            " if (!b) return false; b.click(); return true;",
            job_id,
            action,
        )
    )


def test_watch_an_ingest_job_finish(browser: WebDriver, console: Console) -> None:
    browser.get(browser.current_url.split("#")[0] + "#jobs")
    docs = [
        {
            "external_id": f"note-{i}",
            "text": f"Meeting note number {i} about roadmaps.",
            "acl": {"public": True},
        }
        for i in range(6)
    ]
    job_id = console.api("POST", "/v1/documents", "ingest", json={"documents": docs}).json()["job_id"]
    _wait(browser, lambda d: _job_state(d, job_id) is not None)
    _wait(browser, lambda d: _job_state(d, job_id) == "succeeded")
    assert "6/6 documents processed" in browser.execute_script(
        "return document.querySelector(`tr[data-job-id='${arguments[0]}']`).textContent", job_id
    )
    _wait(browser, lambda d: _job_click(d, job_id, "details"))
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "job-detail"), "No item errors"))
    # a job no runner has picked up yet: cancel it, then resume it, from the page
    with psycopg.connect(console.db_url) as conn:
        item = jobs_repo.NewItem(external_id="late", mime_type="text/plain", payload=b"A late memo.")
        queued = str(jobs_repo.create_job(conn, tenant_id="acme", kind="ingest", items=[item]))
    _wait(browser, lambda d: _job_state(d, queued) == "queued")
    _wait(browser, lambda d: _job_click(d, queued, "cancel"))
    _wait(browser, lambda d: _job_state(d, queued) == "cancelled")
    _wait(browser, lambda d: _job_click(d, queued, "resume"))
    _wait(browser, lambda d: _job_state(d, queued) == "succeeded")
    _shot(browser, console, "jobs")


def _row(driver: WebDriver, job_id: str) -> dict | None:
    return driver.execute_script(
        "const r = document.querySelector(`tr[data-job-id='${arguments[0]}']`); if (!r) return null;"
        " const p = r.querySelector('progress');"
        " return {state: r.dataset.state, text: r.textContent,"
        " value: p.hasAttribute('value') ? p.value : null,"
        " resume: !!r.querySelector(\"button[data-action='resume']\"),"
        " cancel: !!r.querySelector(\"button[data-action='cancel']\")};",
        job_id,
    )


def test_job_feedback_failed_cancelling_and_a_refused_resume(browser: WebDriver, console: Console) -> None:
    browser.get(browser.current_url.split("#")[0] + "#jobs")
    # a job whose only document fails: no full bar, no Resume (the API would refuse it)
    empty = {
        "external_id": "blank",
        "content_base64": "ICAgCg==",
        "mime_type": "text/plain",
        "acl": {"public": True},
    }
    failed = console.api("POST", "/v1/documents", "ingest", json={"documents": [empty]}).json()["job_id"]
    _wait(browser, lambda d: (_row(d, failed) or {}).get("state") == "failed")
    row = _row(browser, failed)
    # processed 1 of 1 as the API and the CLI say it (services.jobs.progress_line); the bar: 0 written
    assert row is not None and row["value"] == 0 and "1/1 documents processed · 1 failed" in row["text"]
    assert not row["resume"]
    # a running job held by another worker: Cancel shows "cancelling" at once, until it stops
    with psycopg.connect(console.db_url) as conn:
        principals_repo.ensure_tenant(conn, tenant_id="acme")
        item = jobs_repo.NewItem(external_id="slow", mime_type="text/plain", payload=b"A slow memo.")
        held = jobs_repo.create_job(conn, tenant_id="acme", kind="ingest", items=[item])
        assert jobs_repo.claim_job(conn, job_id=held, owner="elsewhere", lease_seconds=3600)
    job_id = str(held)
    _wait(browser, lambda d: (_row(d, job_id) or {}).get("state") == "running")
    row = _row(browser, job_id)
    assert row is not None and row["value"] is None and "starting" in row["text"]  # indeterminate
    _wait(browser, lambda d: _job_click(d, job_id, "cancel"))
    _wait(browser, lambda d: (_row(d, job_id) or {}).get("state") == "cancelling", timeout=5)
    assert not (_row(browser, job_id) or {}).get("cancel")  # asked once; no second Cancel
    _shot(browser, console, "jobs-cancelling")
    with psycopg.connect(console.db_url) as conn:
        assert jobs_repo.finish_job(conn, job_id=held) == "cancelled"  # the worker stops
    _wait(browser, lambda d: (_row(d, job_id) or {}).get("resume") is True)
    # the API refuses a resume the page offered (its items ran meanwhile): the reason stays shown
    with psycopg.connect(console.db_url) as conn:
        conn.execute("UPDATE job_items SET state = 'failed' WHERE job_id = %s", (held,))
    assert _job_click(browser, job_id, "resume")
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "jobs-action-error"), "no items left to run"))
    time.sleep(2.5)  # two refreshes of the table later
    assert "no items left to run" in browser.find_element(By.ID, "jobs-action-error").text
    _shot(browser, console, "jobs-refused-resume")


def test_swap_and_roll_back_a_version(browser: WebDriver, console: Console) -> None:
    config = factories.rebuild(index_root=console.index_root, n_shards=2)
    v1 = rebuild(console.db_url, config)
    v2 = rebuild(console.db_url, config)
    assert (
        console.api("POST", "/v1/admin/index/aliases/live:swap", "admin", json={"version_id": v1}).status_code
        == 200
    )
    browser.get(browser.current_url.split("#")[0] + "#index")
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "serving-version"), v1))
    Select(browser.find_element(By.ID, "swap-select-live")).select_by_value(v2)
    browser.find_element(By.ID, "swap-live").click()
    _wait(browser, ec.alert_is_present()).accept()
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "serving-version"), v2))
    browser.find_element(By.ID, "rollback-live").click()
    _wait(browser, ec.alert_is_present()).accept()
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "serving-version"), v1))
    browser.find_element(By.CSS_SELECTOR, f'tr[data-version="{v1}"] button').click()
    _wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "#index-quality table")))
    _shot(browser, console, "index")
    served = console.api("POST", "/v1/retrieve", "admin", json={"query": "office kitchen"}).json()
    assert served["index_version"] == v1
    # the playground now names the version and each shard's planner strategy
    _search_as(browser, "user:alice")
    assert browser.find_element(By.ID, "result-version").text == v1
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.plans tbody tr")) == 2
    # no shard totals: they count every tenant's vectors (issue 43)
    assert "Total" not in browser.find_element(By.CSS_SELECTOR, "table.plans thead").text
    _shot(browser, console, "search-indexed")
    # an index exists but nothing matches the filters: "no results", not "no index version yet"
    _fill(browser, "f-source", "nowhere")
    browser.find_element(By.CSS_SELECTOR, "#search-form button[type=submit]").click()
    _wait(browser, ec.presence_of_element_located((By.ID, "no-results")))
    hint = browser.find_element(By.ID, "plans-hint").text
    assert "No results" in hint and "no index version" not in hint
    _fill(browser, "f-source", "")


def test_keys_page_shows_a_new_token_once(browser: WebDriver, console: Console) -> None:
    browser.get(browser.current_url.split("#")[0] + "#keys")
    _wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "#keys-out tr[data-key-id]")))
    _fill(browser, "k-principal", "user:carol")
    _fill(browser, "k-name", "carol's key")
    browser.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()
    token = _wait(browser, ec.visibility_of_element_located((By.ID, "new-token"))).text
    assert token.startswith("rl_")
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "keys-out"), "user:carol"))
    assert token not in browser.find_element(By.ID, "keys-out").text
    _shot(browser, console, "keys")
    logs = browser.get_log("browser")  # type: ignore[attr-defined]  # Chrome's driver has it
    errors = [e for e in logs if "Content Security Policy" in e.get("message", "")]
    assert not errors, errors
    print(f"console screenshots: {sorted(p.name for p in console.shots.iterdir())} in {console.shots}")


def test_a_tenant_admin_sees_no_index_page(browser: WebDriver, console: Console) -> None:
    """The console shows each key only what its roles may do: no Index page (nor the operator
    role in the key form) for a tenant admin. Runs last: it signs the session out."""
    browser.find_element(By.ID, "sign-out").click()
    _fill(browser, "signin-key", console.keys["tenant_admin"])
    browser.find_element(By.ID, "signin-key").send_keys(Keys.ENTER)
    _wait(browser, ec.visibility_of_element_located((By.ID, "nav")))
    assert browser.find_element(By.CSS_SELECTOR, '#nav a[data-page="search"]').is_displayed()
    assert not browser.find_element(By.CSS_SELECTOR, '#nav a[data-page="index"]').is_displayed()
    browser.get(browser.current_url.split("#")[0] + "#index")
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.page") == "search")
    browser.get(browser.current_url.split("#")[0] + "#keys")
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.page") == "keys")
    assert not browser.find_element(By.ID, "k-operator").is_displayed()
