"""The memory inspector on a big agent: 100 blocks and 10k archival passages.

    python -m bench ui

Times what the page asks for when it opens (agents, the agent view with every block, the first page of
passages, the first change poll) through the real app (Guard + Starlette, in process), and, if Chromium
and chromedriver are installed, the wall time until the page in headless Chromium says it is ready.
Passages use the hashing embedder: embedding is not what the page waits for.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import save, stats

BLOCKS, PASSAGES, RUNS = 100, 10_000, 20


def _store(root: Path) -> Any:
    from tiermem.base.config import BlockSpec, load_settings
    from tiermem.domain.factory import open_memory

    settings = load_settings(data_dir=root / "data", embedding_model="hashing")
    memory = open_memory(settings)
    agent = memory.ensure_agent("default")
    for i in range(BLOCKS - 2):
        memory.create_block(
            agent.id,
            BlockSpec(
                label=f"notes_{i:03d}", value=f"Note {i}: " + "x" * 400, description=f"notes block {i}", limit=5000
            ),
        )
    assert memory.archive is not None
    memory.archive.insert_many(
        agent.id, [(f"Passage {i} about topic {i % 97}", [f"t{i % 13}"]) for i in range(PASSAGES)]
    )
    return settings


def _api(settings: Any) -> dict[str, Any]:
    from starlette.testclient import TestClient

    from tiermem.ui.launch import build_ui_server

    app, url = build_ui_server(settings, port=8999)
    token = url.split("#token=", 1)[1]
    out: dict[str, Any] = {}
    with TestClient(app, base_url="http://127.0.0.1:8999", headers={"authorization": f"Bearer {token}"}) as c:
        calls = {
            "agents": lambda: c.get("/ui/api/agents"),
            "agent_view_100_blocks": lambda: c.get("/ui/api/agent", params={"agent": "default"}),
            "passages_first_page": lambda: c.get("/ui/api/passages", params={"agent": "default", "limit": 50}),
            "changes_poll": lambda: c.get("/ui/api/changes", params={"agent": "default", "since": "x", "wait": 0}),
        }
        for name, call in calls.items():
            call().raise_for_status()  # warm
            samples = []
            for _ in range(RUNS):
                t = time.perf_counter()
                call().raise_for_status()
                samples.append(time.perf_counter() - t)
            out[name] = stats(samples)
        view = c.get("/ui/api/agent", params={"agent": "default"}).json()
        out["agent_view_bytes"] = len(c.get("/ui/api/agent", params={"agent": "default"}).content)
        assert len(view["blocks"]) == BLOCKS and view["counts"]["passages"] == PASSAGES
    return out


def _browser(settings: Any) -> dict[str, Any] | None:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        print("  (no chromium/chromedriver: page load in a browser not measured)")
        return None
    import threading

    import uvicorn
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tiermem.ui.launch import build_ui_server, free_port

    port = free_port("127.0.0.1")
    app, url = build_ui_server(settings, port=port)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off", timeout_graceful_shutdown=1)
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    profile = tempfile.mkdtemp(prefix="tiermem-bench-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver_path), options=options)
    samples = []
    try:
        for _ in range(5):
            t = time.perf_counter()
            driver.get(url)
            WebDriverWait(driver, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
            samples.append(time.perf_counter() - t)
            assert len(driver.find_elements(By.CSS_SELECTOR, "#blocks li")) == BLOCKS
            driver.get("about:blank")
    finally:
        driver.quit()
        server.should_exit = True
        shutil.rmtree(profile, ignore_errors=True)
    return {"page_ready": stats(samples)}


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="tiermem-bench-ui-"))
    try:
        t = time.perf_counter()
        settings = _store(root)
        print(f"  store: {BLOCKS} blocks, {PASSAGES} passages in {time.perf_counter() - t:.1f} s")
        result: dict[str, Any] = {"blocks": BLOCKS, "passages": PASSAGES, "api": _api(settings)}
        for name, value in result["api"].items():
            print(f"  {name}: {value}")
        browser = _browser(settings)
        if browser:
            result.update(browser)
            print(f"  page ready in Chromium: {browser['page_ready']}")
        save("ui", result)
    finally:
        shutil.rmtree(root, ignore_errors=True)
