"""The inspector's Folders section in a real browser (headless Chromium, Selenium): the harness of
``test_ui_browser`` (one served app, a browser following the token link), skipped as it is skipped, with the reason,
where Chromium, chromedriver or Selenium is missing."""

from __future__ import annotations

from typing import Any

# Imported first: it skips this module, with the reason, where the browser or Selenium is missing.
from .test_ui_browser import (  # noqa: F401  (fixtures)
    ADMIN,
    ARTIFACTS,
    WORK,
    By,
    Site,
    alert_text,
    browser,
    by_id,
    click,
    site,
    until,
)


def test_folders_view_shows_a_files_status_and_the_agents_window(site: Site, browser: Any) -> None:  # noqa: F811
    memory = site.memory
    if "handbook" not in [f.name for f in memory.files.folders()]:
        memory.files.create_folder("handbook", description="How we work")
        memory.files.attach(site.agent_id, "handbook")  # while empty: every file starts closed
        memory.files.upload_many(
            "handbook",
            [("guide.md", b"# Guide\nShip small changes, often.\n", ""), ("blob.bin", b"\x00\x01\x02\xff\xfe", "")],
        )
    click(browser, "#f-reload")
    click(browser, f'#folders tr[data-folder="{memory.files.folder("handbook").id}"]')  # (a row is its folder's id)
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#files tbody tr[data-file]")) == 2)
    status = {
        tr.get_attribute("data-file"): tr.find_element(By.CSS_SELECTOR, ".status").text
        for tr in browser.find_elements(By.CSS_SELECTOR, "#files tbody tr[data-file]")
    }
    assert status == {"guide.md": "completed", "blob.bin": "error"}

    click(browser, '#files tr[data-file="guide.md"]')
    until(browser, lambda d: "closed for work" in by_id(d, "file-window").text)
    assert by_id(browser, "file-name").text == "handbook/guide.md"
    browser.save_screenshot(str(ARTIFACTS / "folders.png"))


def test_rename_a_folder_in_the_browser(site: Site, browser: Any) -> None:  # noqa: F811
    """The folder view's rename form: a token for one agent is refused with the reason, a name another folder has is
    refused with the CLI's text, and a token for every agent renames it; a refusal changes nothing."""
    memory = site.memory
    folder = memory.files.create_folder("manual", description="to rename")
    memory.files.attach(site.agent_id, "manual")
    memory.files.create_folder("taken")

    def rename(new: str) -> None:
        click(browser, "#f-reload")
        click(browser, f'#folders tr[data-folder="{folder.id}"]')
        until(browser, lambda d: by_id(d, "folder-name").text in ("manual", "guide"))
        by_id(browser, "folder-new-name").clear()
        by_id(browser, "folder-new-name").send_keys(new)
        click(browser, "#folder-rename")

    rename("guide")
    until(browser, lambda d: 'agents = ["*"]' in alert_text(d))  # this token covers "work" only
    assert memory.files.folder(folder.id).name == "manual"
    browser.get(site.url.replace(WORK, ADMIN))
    until(browser, lambda d: "private" in [o.text for o in d.find_elements(By.CSS_SELECTOR, "#agent option")])
    rename("taken")
    until(browser, lambda d: "taken" in alert_text(d) and "Renamed" not in alert_text(d))
    assert memory.files.folder(folder.id).name == "manual"
    rename("guide")
    until(browser, lambda d: "Renamed folder manual to guide." in alert_text(d))
    until(browser, lambda d: by_id(d, "folder-name").text == "guide")
    assert memory.files.folder(folder.id).name == "guide"
    browser.get(site.url)  # back to the token for "work"
    until(browser, lambda d: [o.text for o in d.find_elements(By.CSS_SELECTOR, "#agent option")] == ["work"])
