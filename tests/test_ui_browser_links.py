"""The inspector's Links section in a real browser (headless Chromium, Selenium): the harness of ``test_ui_browser``
(one served app, a browser following the token link), skipped as it is skipped, with the reason, where Chromium,
chromedriver or Selenium is missing. With ``UPDATE_DOCS_SCREENSHOTS=1`` the section's screenshot is written to
docs/links.png (the picture in docs/inspector.md); it always goes to tests/artifacts/links.png."""

from __future__ import annotations

import os
import re
from typing import Any

from .conftest import ROOT

# Imported first: it skips this module, with the reason, where the browser or Selenium is missing.
from .test_ui_browser import ARTIFACTS, By, Site, browser, by_id, click, site, until  # noqa: F401  (fixtures)

TRIP = [
    ("2024-05-08T10:00:00", "Caroline: I am planning a trip for the summer."),
    ("2024-05-08T10:01:00", "Melanie: Where are you going?"),
    ("2024-05-08T10:02:00", "Caroline: To the mountains near Lake Tahoe, with the kids."),
    ("2024-05-08T10:03:00", "Melanie: Lovely, bring warm clothes, the nights are cold up there."),
    ("2024-05-08T10:04:00", "Caroline: Good idea, and the kids want to go fishing."),
]


def test_a_memory_and_its_links_are_drawn(site: Site, browser: Any) -> None:  # noqa: F811
    archive = site.memory.archive
    ids = [
        m.id
        for m in archive.log_messages(
            site.agent_id, [{"role": "user", "content": c, "timestamp": t, "conversation_id": "trip"} for t, c in TRIP]
        )
    ]
    fact = archive.insert(site.agent_id, "Caroline's family spends the summer at Lake Tahoe", ["plans"])[0]
    archive.links.add(site.agent_id, ids[2], fact, "the plan")
    browser.set_window_size(1100, 1000)  # wide enough for the picture at its own size
    by_id(browser, "ln-id").send_keys(ids[2])
    click(browser, "#ln-go")
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#ln-graph .ln-node")) == 4)
    kinds = sorted(e.get_attribute("data-kind") for e in browser.find_elements(By.CSS_SELECTOR, "#ln-graph .ln-edge"))
    assert kinds == ["manual", "sitting", "sitting"]
    center = browser.find_element(By.CSS_SELECTOR, "#ln-graph .ln-node.center")
    assert center.get_attribute("data-id") == ids[2] and "Lake Tahoe" in center.text
    assert by_id(browser, "ln-summary").text == "3 links"
    browser.execute_script("document.getElementById('links-section').scrollIntoView()")
    browser.save_screenshot(str(ARTIFACTS / "links.png"))
    if os.environ.get("UPDATE_DOCS_SCREENSHOTS"):  # the docs' picture changes only when asked for
        (ROOT / "docs" / "links.png").write_bytes(browser.find_element(By.ID, "links-section").screenshot_as_png)

    click(browser, f'#ln-graph .ln-node[data-id="{fact}"]')  # a linked memory becomes the middle
    until(
        browser,
        lambda d: d.find_element(By.CSS_SELECTOR, "#ln-graph .ln-node.center").get_attribute("data-id") == fact,
    )
    assert by_id(browser, "ln-summary").text == "1 link"


NOTE = "the plan they made together for the summer, with the kids, the dogs and the boat"
INSIDE = """
const out = [];
for (const g of document.querySelectorAll("#ln-graph .ln-node")) {
  const box = g.querySelector("rect").getBBox();
  for (const t of g.querySelectorAll("text")) {
    const b = t.getBBox();
    if (b.x < box.x || b.x + b.width > box.x + box.width) out.push(t.textContent);
  }
}
return out;
"""


def test_long_labels_stay_inside_their_nodes(site: Site, browser: Any) -> None:  # noqa: F811
    """A long note and a long word are cut with an ellipsis where the node's box ends, measured as drawn; the node's
    tooltip holds them whole."""
    archive = site.memory.archive
    turn = archive.log_messages(
        site.agent_id, [{"role": "user", "content": "Where do we go this summer?", "conversation_id": "boat"}]
    )[0].id
    url = "https://example.org/summer/2024/lake-tahoe/the-cabin-by-the-water/booking-confirmation"
    fact = archive.insert(site.agent_id, f"The cabin is booked: {url}", ["plans"])[0]
    archive.links.add(site.agent_id, turn, fact, NOTE)
    browser.set_window_size(1100, 1000)
    box = by_id(browser, "ln-id")
    box.clear()
    box.send_keys(turn)
    click(browser, "#ln-go")
    node = f'#ln-graph .ln-node[data-id="{fact}"]'
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, node))
    assert browser.execute_script(INSIDE) == []
    browser.execute_script("document.getElementById('links-section').scrollIntoView()")
    browser.save_screenshot(str(ARTIFACTS / "links-long-labels.png"))
    linked = browser.find_element(By.CSS_SELECTOR, node)
    head = linked.find_element(By.CSS_SELECTOR, ".ln-head").get_attribute("textContent")
    assert re.fullmatch(r"manual: the plan .*… · archival", head)  # the note gives way, the kind stays
    assert any(t.get_attribute("textContent").endswith("…") for t in linked.find_elements(By.CSS_SELECTOR, "text")[1:])
    title = linked.find_element(By.TAG_NAME, "title").get_attribute("textContent")
    assert f"manual: {NOTE}" in title and url in title
