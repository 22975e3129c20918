"""The inspector's use badges in a real browser (headless Chromium, Selenium): the harness of ``test_ui_browser``,
skipped as it is skipped, with the reason, where Chromium, chromedriver or Selenium is missing."""

from __future__ import annotations

from typing import Any

# Imported first: it skips this module, with the reason, where the browser or Selenium is missing.
from .test_ui_browser import ARTIFACTS, By, Site, browser, by_id, site, until  # noqa: F401  (fixtures)


def test_each_passage_shows_its_temperature_and_the_page_a_summary(site: Site, browser: Any) -> None:  # noqa: F811
    memory = site.memory
    listed, _ = memory.archive.list_passages(site.agent_id)
    used = listed[0].id
    for _ in range(3):
        memory.uses.note("passage", site.agent_id, [used])
    browser.get(site.url)
    browser.refresh()  # the fixture loaded this very URL before the uses: its page would show them as they were then
    until(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    # Read in one go, inside the wait: the list re-renders as the page settles (a replaced element is looked up again).
    text, cls = until(
        browser,
        lambda d: (lambda b: (b.text, b.get_attribute("class")))(
            d.find_element(By.CSS_SELECTOR, f'#passages tr[data-id="{used}"] .badge')
        ),
    )
    assert text == "hot" and "temp-hot" in cls
    others = until(
        browser,
        lambda d: [b.text for b in d.find_elements(By.CSS_SELECTOR, f'#passages tr:not([data-id="{used}"]) .badge')],
    )
    assert set(others) == {"cold"}
    summary = until(browser, lambda d: by_id(d, "use-summary").text or None)
    assert "passage: 1 hot, 0 warm" in summary and "half-life 14 days" in summary
    by_id(browser, "passages-section").screenshot(str(ARTIFACTS / "inspector-uses.png"))
