"""The inspector's Timeline section in a real browser (headless Chromium, Selenium): the harness of
``test_ui_browser`` (one served app, a browser following the token link), skipped as it is skipped, with the reason,
where Chromium, chromedriver or Selenium is missing. With ``UPDATE_DOCS_SCREENSHOTS=1`` the section's screenshot is
written to docs/timeline.png (the picture in docs/inspector.md); it always goes to tests/artifacts/timeline.png."""

from __future__ import annotations

import os
from typing import Any

from tiermem.domain.archive import parse_bound

from .conftest import ROOT
from .test_timeline import RECALL

# Imported first: it skips this module, with the reason, where the browser or Selenium is missing.
from .test_ui_browser import ARTIFACTS, By, Site, browser, by_id, click, site, until  # noqa: F401  (fixtures)

MORE = [  # a few months of one person's life, so the chart has something to show
    ("2024-03-02T10:00:00", "Caroline: I started pottery classes on Saturdays"),
    ("2024-03-09T10:00:00", "Caroline: my first pottery bowl cracked in the kiln"),
    ("2024-03-16T10:00:00", "Melanie: pottery sounds relaxing, send a photo of the bowl"),
    ("2024-04-06T11:00:00", "Caroline: I signed up for the charity run in May"),
    ("2024-04-13T07:00:00", "Caroline: ran eight kilometres this morning for the charity run"),
    ("2024-04-20T07:00:00", "Melanie: how is the training for the run going?"),
    ("2024-04-27T07:00:00", "Caroline: the run training is going well"),
    ("2024-07-04T19:00:00", "Caroline: fireworks by the lake with the dogs, they hated it"),
    ("2024-07-20T19:00:00", "Melanie: the dogs need a quiet place during fireworks"),
]


def test_the_chart_shows_periods_and_a_bar_lists_what_it_holds(site: Site, browser: Any) -> None:  # noqa: F811
    memory = site.memory
    memory.archive.log_messages(
        site.agent_id, [{"role": "user", "content": c, "timestamp": t} for t, c in sorted(MORE + RECALL)]
    )
    facts = [
        ("2024-03-10T12:00:00", "Caroline's pottery teacher is called Ines", ["people"]),
        ("2024-04-28T12:00:00", "Caroline runs the charity 10k on 12 May", ["events"]),
        ("2024-05-13T12:00:00", "Caroline's dogs are called Oscar and Bailey", ["pets"]),
        ("2024-07-05T12:00:00", "Caroline's dogs are scared of fireworks", ["pets"]),
    ]
    memory.archive.insert_many(
        site.agent_id,
        [(c, tags) for _, c, tags in facts],
        created=[parse_bound(t, "t", end=False) for t, _, _ in facts],
    )
    browser.find_element(By.ID, "tl-from").send_keys("03/01/2024")  # the date input's own (US) format
    by_id(browser, "tl-to").send_keys("07/31/2024")
    click(browser, "#tl-go")
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tl-chart .bar")) == 5)
    bars = {
        g.get_attribute("data-period"): int(g.get_attribute("data-total"))
        for g in browser.find_elements(By.CSS_SELECTOR, "#tl-chart .bar")
    }
    assert bars == {"2024-03": 4, "2024-04": 5, "2024-05": 4, "2024-06": 2, "2024-07": 3}
    assert browser.find_elements(By.CSS_SELECTOR, '#tl-chart .bar[data-period="2024-05"] rect.k-recall')

    click(browser, '#tl-chart .bar[data-period="2024-03"]')
    until(
        browser,
        lambda d: by_id(d, "tl-period").text == "2024-03" and not by_id(d, "tl-period-wrap").get_attribute("hidden"),
    )
    rows = browser.find_elements(By.CSS_SELECTOR, "#tl-items tbody tr")
    assert [r.get_attribute("data-kind") for r in rows] == ["recall", "recall", "archival", "recall"]
    assert "pottery classes" in rows[0].text
    terms = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#tl-rising .term")]
    assert terms[:2] == ["pottery", "bowl"] or set(terms[:2]) == {"pottery", "bowl"}
    browser.execute_script("document.getElementById('timeline-section').scrollIntoView()")
    browser.save_screenshot(str(ARTIFACTS / "timeline.png"))
    if os.environ.get("UPDATE_DOCS_SCREENSHOTS"):  # the docs' picture changes only when asked for
        _save_section(browser, ROOT / "docs" / "timeline.png")

    click(browser, '#tl-chart .bar[data-period="2024-04"]')  # another bar: its own list
    until(browser, lambda d: by_id(d, "tl-period").text == "2024-04")
    until(browser, lambda d: "charity run" in by_id(d, "tl-items").text)


def _save_section(browser: Any, path: Any) -> None:
    """The Timeline section alone, as the docs show it."""
    section = browser.find_element(By.ID, "timeline-section")
    path.write_bytes(section.screenshot_as_png)


def test_a_failed_load_leaves_no_alert_once_the_timeline_loads(site: Site, browser: Any) -> None:  # noqa: F811
    """The section's error comes down when it next loads; the dates are set as the date inputs hold them."""
    dates = (
        "document.getElementById('tl-from').value = arguments[0]; document.getElementById('tl-to').value = arguments[1]"
    )
    browser.execute_script(dates, "2024-07-31", "2024-03-01")
    click(browser, "#tl-go")
    until(browser, lambda d: "is after to" in by_id(d, "alert").text)
    browser.execute_script(dates, "2024-03-01", "2024-07-31")
    click(browser, "#tl-go")
    until(browser, lambda d: not by_id(d, "alert").is_displayed())
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tl-chart .bar")) == 5
