"""The memory inspector in a real browser: headless Chromium driven by Selenium (Debian's chromium-driver).

One real ``tiermem serve --transport http`` app (the MCP endpoint and ``/ui`` behind bearer tokens) runs
on loopback in a thread; the browser opens ``/ui/#token=...`` like a person following the link. A host
edits memory through the MCP tools over ``/mcp``; the test then finds what the page did in the store.
Screenshots go to ``tests/artifacts/`` (not committed). Skipped, with the reason, where Chromium,
chromedriver or Selenium is missing (``.ci/run`` installs them).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tiermem.base.config import BlockSpec, load_settings
from tiermem.domain.blocks import Rethink
from tiermem.domain.factory import open_memory
from tiermem.process.netguard import make_tokens
from tiermem.server.app import build_http_app, build_server
from tiermem.server.runtime import MemoryHandle
from tiermem.ui.launch import http_mount

from .conftest import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)
selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[test]')")
if CHROMIUM is None or DRIVER is None:
    pytest.skip(
        "Chromium or chromedriver is not installed (apt-get install chromium chromium-driver)", allow_module_level=True
    )

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ARTIFACTS = ROOT / "tests" / "artifacts"
WORK = "1b7d9f3a5c2e4a6b8d0f1e3c5a7b9d2f"  # covers the served agent only
ADMIN = "e8c6a4b2d0f9e7c5a3b1d8f6e4c2a0b9"  # covers every agent: imports and full backups need it
AF = ROOT / "tests" / "fixtures" / "agent-file" / "customer_service.af"
WAIT = 30  # seconds a wait-until may take before the test fails (never a timing assertion)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Site:
    """The served app, its store, and an MCP client for the "host"."""

    def __init__(self, root: Path) -> None:
        import uvicorn

        self.port = _free_port()
        self.settings = load_settings(
            data_dir=root / "data",
            embedding_model="hashing",
            transport="http",
            port=self.port,
            agent="work",
            watch_seconds=0.2,
        )
        self.memory = open_memory(self.settings)
        self.agent_id = self.memory.ensure_agent("work").id
        self.memory.ensure_agent("private")  # not covered by the browser's token: never shown
        self.memory.create_block(
            self.agent_id,
            BlockSpec(label="rules", value="Be brief.", limit=60, read_only=True, description="house rules"),
        )
        assert self.memory.archive is not None
        self.memory.archive.insert(self.agent_id, "Ada drinks green tea every morning", ["drinks"])
        self.memory.archive.insert(self.agent_id, "The compiler launch is planned for June", ["work"])
        handle = MemoryHandle(lambda: (self.memory, self.agent_id))
        tokens = make_tokens([{"token": WORK, "agents": ["work"]}, {"token": ADMIN, "agents": ["*"]}], "test")
        app = build_http_app(
            build_server(handle, self.settings), self.settings, tokens, ui=http_mount(handle, self.settings)
        )
        self.server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=self.port, log_config=None, access_log=False, timeout_graceful_shutdown=1
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + WAIT
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}/ui/#token={WORK}"

    def host_call(self, tool: str, args: dict[str, Any]) -> None:
        """A host's tool call over streamable HTTP, as Claude Desktop or Cursor would make it."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async def go() -> None:
            http = httpx2.AsyncClient(headers={"authorization": f"Bearer {WORK}"}, timeout=30)
            async with Client(
                streamable_http_client(f"http://127.0.0.1:{self.port}/mcp", http_client=http), cache=None
            ) as c:
                result = await c.call_tool(tool, args)
                assert not result.is_error, result

        anyio.run(go)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.memory.uses.close()  # the last use counts are written before the directory goes (as `serve` does)


@pytest.fixture(scope="module")
def site():  # type: ignore[no-untyped-def]
    root = Path(tempfile.mkdtemp(prefix="tiermem-ui-"))
    s = Site(root)
    yield s
    s.close()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(site: Site):  # type: ignore[no-untyped-def]
    profile = tempfile.mkdtemp(prefix="tiermem-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=options)
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        driver.get(site.url)
        WebDriverWait(driver, WAIT).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def until(driver: Any, condition: Any) -> Any:
    """Wait until ``condition`` holds (the page re-renders as it goes: a replaced element is looked up again)."""
    ignored = (StaleElementReferenceException, NoAlertPresentException, IndexError)
    return WebDriverWait(driver, WAIT, ignored_exceptions=ignored).until(lambda d: condition(d))


def by_id(driver: Any, id_: str) -> Any:
    return driver.find_element(By.ID, id_)


def click(driver: Any, css: str) -> None:
    """Click the element ``css`` names, looking it up again if the page re-rendered it meanwhile."""
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, css).click() or True)


def open_block(driver: Any, label: str) -> None:
    click(driver, f'#blocks li[data-label="{label}"] button')
    until(driver, lambda d: by_id(d, "ed-label").text == label)


def alert_text(driver: Any) -> str:
    return str(by_id(driver, "alert").text)


def test_load_shows_the_tokens_agents_and_blocks(site: Site, browser: Any) -> None:
    assert "#token" not in browser.current_url  # the secret is taken out of the address bar
    options = [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#agent option")]
    assert options == ["work"]  # "private" exists but this token does not cover it
    labels = [li.get_attribute("data-label") for li in browser.find_elements(By.CSS_SELECTOR, "#blocks li")]
    assert labels == ["persona", "human", "rules"]
    rules = browser.find_element(By.CSS_SELECTOR, '#blocks li[data-label="rules"]').text
    assert "read-only" in rules and "9 / 60 chars" in rules
    until(browser, lambda d: by_id(d, "live").text == "live")
    assert "(2)" in by_id(browser, "passage-count").text
    browser.save_screenshot(str(ARTIFACTS / "inspector-load.png"))


def test_edit_a_block_makes_a_version_by_human(site: Site, browser: Any) -> None:
    """With the keyboard only: Enter on the block's button opens it, Ctrl+S in the editor saves."""
    from selenium.webdriver.common.keys import Keys

    until(
        browser,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, '#blocks li[data-label="human"] button').send_keys(Keys.ENTER) or True
        ),
    )
    until(browser, lambda d: by_id(d, "ed-label").text == "human")
    before = site.memory.block(site.agent_id, "human")
    box = by_id(browser, "ed-value")
    assert browser.switch_to.active_element == box  # focus moved into the editor
    box.clear()
    box.send_keys("Name: Ada\nWorks on compilers")
    box.send_keys(Keys.CONTROL, "s")
    until(browser, lambda d: f"version {before.version + 1}" in alert_text(d))
    top = site.memory.history(site.agent_id, "human", 1)[0]
    assert (top.version, top.value, top.actor) == (before.version + 1, "Name: Ada\nWorks on compilers", "human")
    newest = f'#history tr[data-version="{before.version + 1}"] td:nth-child(3)'
    until(browser, lambda d: d.find_element(By.CSS_SELECTOR, newest).text == "human")


def test_limit_and_read_only_are_shown_not_bypassed(site: Site, browser: Any) -> None:
    open_block(browser, "rules")
    assert by_id(browser, "ed-ro").is_displayed()
    box = by_id(browser, "ed-value")
    box.send_keys(" " + "x" * 60)
    until(browser, lambda d: "over the limit" in by_id(d, "ed-count").text)
    by_id(browser, "ed-save").click()
    until(browser, lambda d: "read-only" in alert_text(d))  # refused: the person did not confirm
    by_id(browser, "ed-override").click()
    by_id(browser, "ed-save").click()
    until(browser, lambda d: "Exceeds 60 character limit" in alert_text(d))  # refused again: the limit
    assert site.memory.block(site.agent_id, "rules").version == 1  # nothing was written
    box.clear()
    box.send_keys("Be brief. Be kind.")
    by_id(browser, "ed-save").click()
    until(browser, lambda d: "Saved rules as version 2" in alert_text(d))
    assert site.memory.block(site.agent_id, "rules").value == "Be brief. Be kind."


def test_a_hosts_edit_appears_live(site: Site, browser: Any) -> None:
    open_block(browser, "human")
    site.host_call("memory_insert", {"label": "human", "new_string": "Prefers tea"})
    until(browser, lambda d: by_id(d, "ed-value").get_attribute("value").endswith("Prefers tea"))
    version = site.memory.block(site.agent_id, "human").version
    until(
        browser,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, f'#history tr[data-version="{version}"] td:nth-child(3)').text == "agent"
        ),
    )
    browser.save_screenshot(str(ARTIFACTS / "inspector-live.png"))


def test_diff_and_revert(site: Site, browser: Any) -> None:
    open_block(browser, "human")
    current = site.memory.block(site.agent_id, "human")
    click(browser, f'#history tr[data-version="{current.version}"] .diff-btn')
    until(browser, lambda d: "+Prefers tea" in by_id(d, "diff").text)
    browser.set_window_size(1400, 1400)  # blocks, editor, history and the diff in one picture (the README's)
    browser.save_screenshot(str(ARTIFACTS / "inspector-diff.png"))
    browser.set_window_size(1400, 1000)
    target = current.version - 1
    click(browser, '#history tr[data-version="1"] .diff-current-btn')  # any version against the current one
    until(browser, lambda d: f"version 1 → {current.version}" in by_id(d, "diff-title").text)
    assert "+Name: Ada" in by_id(browser, "diff").text
    click(browser, f'#history tr[data-version="{target}"] .revert-btn')
    confirm = until(browser, lambda d: d.switch_to.alert)
    assert f"version {target}" in confirm.text
    confirm.accept()
    until(browser, lambda d: f"Reverted human to version {target}" in alert_text(d))
    top = site.memory.history(site.agent_id, "human", 1)[0]
    assert (top.actor, top.operation, top.value) == ("human", f"revert:{target}", "Name: Ada\nWorks on compilers")
    assert by_id(browser, "ed-value").get_attribute("value") == "Name: Ada\nWorks on compilers"


def test_forget_a_past_version_in_the_browser(site: Site, browser: Any) -> None:
    """The history's "Forget this version": the value leaves the history (and, with now, the files) at once."""
    site.memory.edit(site.agent_id, "human", Rethink("Name: Ada\nPIN hint: zebra-quartz-4471"))
    site.memory.edit(site.agent_id, "human", Rethink("Name: Ada"))
    open_block(browser, "human")
    forgotten = site.memory.history(site.agent_id, "human", 2)[1]
    assert "zebra-quartz-4471" in forgotten.value
    click(browser, f'#history tr[data-version="{forgotten.version}"] .forget-btn')
    confirm = until(browser, lambda d: d.switch_to.alert)
    assert f"Forget version {forgotten.version} of human" in confirm.text
    confirm.accept()
    until(browser, lambda d: f"Forgot version {forgotten.version} of human" in alert_text(d))
    assert all("zebra-quartz-4471" not in v.value for v in site.memory.history(site.agent_id, "human", 50))


def test_search_with_relevance_and_delete_a_passage(site: Site, browser: Any) -> None:
    by_id(browser, "s-query").send_keys("green tea")
    by_id(browser, "s-go").click()
    rows = until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#results tbody tr"))
    cells = [td.text for td in rows[0].find_elements(By.TAG_NAME, "td")]
    assert cells[2] == "1" and cells[1] != "" and cells[4] == "drinks" and "green tea" in cells[5]  # keyword rank 1
    browser.save_screenshot(str(ARTIFACTS / "inspector-search.png"))
    passage_id = rows[0].get_attribute("data-id")
    click(browser, f'#results tr[data-id="{passage_id}"] .delete-btn')
    confirm = until(browser, lambda d: d.switch_to.alert)
    assert "green tea" in confirm.text
    confirm.accept()
    until(browser, lambda d: "Deleted 1" in alert_text(d))
    until(browser, lambda d: "(1)" in by_id(d, "passage-count").text)
    assert site.memory.archive is not None
    left, total = site.memory.archive.list_passages(site.agent_id)
    assert total == 1 and passage_id not in [p.id for p in left]


def test_export_and_import_in_the_browser(site: Site, browser: Any) -> None:
    import json

    downloads = Path(tempfile.mkdtemp(prefix="tiermem-downloads-"))
    browser.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    click(browser, "#x-af")
    until(browser, lambda d: (downloads / "work.af").exists() and "Exported work.af" in alert_text(d))
    exported = json.loads((downloads / "work.af").read_text())
    assert {b["label"] for b in exported["blocks"]} == {"persona", "human", "rules"}

    by_id(browser, "i-file").send_keys(str(AF))
    by_id(browser, "i-rename").send_keys("cs-copy")
    click(browser, "#i-go")
    until(browser, lambda d: "every agent" in alert_text(d))  # this token covers "work" only: refused
    assert site.memory.core.find_agent("cs-copy") is None

    browser.get(site.url.replace(WORK, ADMIN))  # the same page with a token for every agent
    until(browser, lambda d: "private" in [o.text for o in d.find_elements(By.CSS_SELECTOR, "#agent option")])
    by_id(browser, "i-file").send_keys(str(AF))
    by_id(browser, "i-rename").clear()  # the form kept the refused attempt's values
    by_id(browser, "i-rename").send_keys("cs-copy")
    click(browser, "#i-go")
    until(browser, lambda d: "Imported customer_service.af" in alert_text(d))
    assert '"cs-copy"' in by_id(browser, "i-report").text
    assert "cs-copy" in [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#agent option")]
    assert site.memory.core.find_agent("cs-copy") is not None
    browser.get(site.url)  # back to the token for "work"
    until(browser, lambda d: [o.text for o in d.find_elements(By.CSS_SELECTOR, "#agent option")] == ["work"])
    shutil.rmtree(downloads, ignore_errors=True)


def test_delete_an_agent_in_the_browser(site: Site, browser: Any) -> None:
    """What will go is shown; the agent's name must be typed; the served agent cannot be deleted from the page."""
    from selenium.webdriver.support.ui import Select

    doomed = site.memory.ensure_agent("doomed")
    site.memory.archive.insert(doomed.id, "a passage of the doomed agent")
    browser.get(site.url.replace(WORK, ADMIN))
    until(browser, lambda d: "doomed" in [o.text for o in d.find_elements(By.CSS_SELECTOR, "#agent option")])
    Select(by_id(browser, "agent")).select_by_visible_text("doomed")
    until(browser, lambda d: "1 passages" in by_id(d, "counts").text)
    click(browser, "#a-delete")
    ask = until(browser, lambda d: d.switch_to.alert)
    assert "blocks: persona, human" in ask.text and "archival passages: 1" in ask.text
    ask.send_keys("wrong name")
    ask.accept()
    until(browser, lambda d: "Type the agent's name" in alert_text(d))
    assert site.memory.core.find_agent("doomed") is not None  # a wrong name deletes nothing
    click(browser, "#a-delete")
    ask = until(browser, lambda d: d.switch_to.alert)
    ask.send_keys("doomed")
    ask.accept()
    until(browser, lambda d: "Deleted agent doomed" in alert_text(d))
    assert site.memory.core.find_agent("doomed") is None
    assert "doomed" not in [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#agent option")]
    Select(by_id(browser, "agent")).select_by_visible_text("work")
    until(browser, lambda d: by_id(d, "agent").get_attribute("value") == "work")
    click(browser, "#a-delete")
    ask = until(browser, lambda d: d.switch_to.alert)
    ask.send_keys("work")
    ask.accept()
    until(browser, lambda d: "serves agent 'work' over /mcp" in alert_text(d))
    assert site.memory.core.find_agent("work") is not None
    browser.get(site.url)  # back to the token for "work"
    until(browser, lambda d: [o.text for o in d.find_elements(By.CSS_SELECTOR, "#agent option")] == ["work"])


HOST_PAGE = """<!doctype html><html><body><iframe id="app" sandbox="allow-scripts" style="width:900px;height:600px"></iframe>
<script>
// A minimal MCP Apps host: answers ui/initialize, sends the tool result, answers the view's tools/call.
const results = RESULTS;
const frame = document.getElementById("app");
window.log = [];
window.addEventListener("message", (e) => {
  const m = e.data; window.log.push(m.method || "response");
  const reply = (result) => frame.contentWindow.postMessage({jsonrpc: "2.0", id: m.id, result}, "*");
  if (m.method === "ui/initialize") reply({protocolVersion: m.params.protocolVersion, hostInfo: {name: "test-host", version: "1"},
                                         hostCapabilities: {}, hostContext: {}});
  else if (m.method === "ui/notifications/initialized")
    frame.contentWindow.postMessage({jsonrpc: "2.0", method: "ui/notifications/tool-result", params: results[0]}, "*");
  else if (m.method === "tools/call") reply(results[1]);
});
frame.srcdoc = APP_HTML;
</script></body></html>"""


def test_block_view_renders_as_an_mcp_app(site: Site, browser: Any) -> None:
    """The ui:// resource in a minimal MCP Apps host page: handshake, the tool's result, a refresh through tools/call."""
    import json

    from mcp import Client

    from tiermem.server.app import build_server
    from tiermem.ui.mcp_app import BLOCKS_URI, blocks_app

    server = build_server(MemoryHandle(lambda: (site.memory, site.agent_id)), site.settings, extensions=[blocks_app()])

    async def fetch() -> tuple[str, list[Any]]:
        async with Client(server, cache=None) as c:
            html = (await c.read_resource(BLOCKS_URI)).contents[0].text
            first = await c.call_tool("memory_blocks_view", {})
            await c.call_tool("memory_open", {"label": "persona"})  # a rethink needs a view first (sessionless)
            await c.call_tool("memory_rethink", {"label": "persona", "new_memory": "I keep notes on compilers."})
            second = await c.call_tool("memory_blocks_view", {})
            return html, [r.model_dump(by_alias=True, mode="json", exclude_none=True) for r in (first, second)]

    html, results = anyio.run(fetch)
    page = Path(tempfile.mkdtemp(prefix="tiermem-host-")) / "host.html"

    def js(value: Any) -> str:  # a JS literal that cannot close the host page's <script>
        return json.dumps(value).replace("</", "<\\/")

    page.write_text(HOST_PAGE.replace("RESULTS", js(results)).replace("APP_HTML", js(html)))
    browser.get(page.as_uri())
    try:
        until(browser, lambda d: d.find_element(By.ID, "app"))
        browser.switch_to.frame(browser.find_element(By.ID, "app"))
        until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".block")) == 3)
        rules = browser.find_element(By.CSS_SELECTOR, '.block[data-label="rules"]').text
        assert "read-only" in rules and "/ 60 chars" in rules
        assert "agent work" in by_id(browser, "agent").text
        browser.save_screenshot(str(ARTIFACTS / "mcp-app-blocks.png"))
        click(browser, "#refresh")  # tools/call through the host: the view shows the newer value
        until(
            browser,
            lambda d: (
                "I keep notes on compilers." in d.find_element(By.CSS_SELECTOR, '.block[data-label="persona"]').text
            ),
        )
        browser.switch_to.default_content()
        log = browser.execute_script("return window.log")
        assert log[:2] == ["ui/initialize", "ui/notifications/initialized"] and "tools/call" in log
    finally:
        browser.switch_to.default_content()
        browser.get(site.url)  # back to the inspector for any later test
