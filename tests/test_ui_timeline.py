"""The inspector's timeline API (no browser): counts per period by kind with rising terms, one period's items, bad
input refused with its message, the token's agents respected; the page ships its chart script."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tiermem.base.config import Settings, load_settings
from tiermem.domain.factory import open_memory
from tiermem.ui.launch import build_ui_server

from .test_timeline import fill

PORT = 8932
BASE = f"http://127.0.0.1:{PORT}"


@pytest.fixture
def ui_settings(tmp_path: Path) -> Settings:
    settings = load_settings(data_dir=tmp_path / "data", embedding_model="hashing", watch_seconds=0.1)
    fill(open_memory(settings), "default")  # another process's writes, as a host's server makes them
    return settings


@pytest.fixture
def client(ui_settings: Settings):  # type: ignore[no-untyped-def]
    app, url = build_ui_server(ui_settings, port=PORT)
    token = url.split("#token=", 1)[1]
    with TestClient(app, base_url=BASE, headers={"authorization": f"Bearer {token}"}) as c:
        yield c


def test_counts_per_period_and_one_periods_items(client: TestClient) -> None:
    span = {"agent": "default", "from": "2024-05-01", "to": "2024-06-30"}
    months = client.get("/ui/api/timeline", params=span).json()
    assert [(p["period"], p["counts"]["recall"], p["counts"]["archival"]) for p in months["periods"]] == [
        ("2024-05", 3, 1),
        ("2024-06", 2, 1),
    ]
    assert months["periods"][0]["rising"][0]["term"] == "dogs"  # each period's rising terms come along
    weeks = client.get("/ui/api/timeline", params={**span, "by": "week", "q": "camping"}).json()
    assert {p["period"]: p["total"] for p in weeks["periods"] if p["total"]} == {"2024-W24": 3}  # "camps" too

    june = client.get("/ui/api/timeline/period", params={**span, "period": "2024-06"}).json()
    assert june["total"] == 3 and [i["kind"] for i in june["items"]] == ["recall", "archival", "recall"]
    assert {"camping", "lake"} & {t["term"] for t in june["rising"]}
    only = client.get("/ui/api/timeline/period", params={**span, "period": "2024-06", "kinds": "archival"}).json()
    assert [i["text"] for i in only["items"]] == ["Caroline camps at Lake Tahoe"]


def test_bad_input_is_refused_with_its_message(client: TestClient) -> None:
    bad = client.get("/ui/api/timeline", params={"agent": "default", "from": "2024-06-01", "to": "2024-05-01"})
    assert bad.status_code == 400 and "is after to" in bad.json()["error"]
    assert client.get("/ui/api/timeline", params={"agent": "default", "by": "year"}).status_code == 400
    period = client.get("/ui/api/timeline/period", params={"agent": "default", "period": "soon"})
    assert period.status_code == 400 and "is not a day" in period.json()["error"]
    assert client.get("/ui/api/timeline", params={"agent": "nobody"}).status_code == 404


def test_the_calendars_last_days_are_counted(client: TestClient) -> None:
    end = {"agent": "default", "from": "9999-12-01", "to": "9999-12-31"}
    days = client.get("/ui/api/timeline", params={**end, "by": "day"})
    assert days.status_code == 200 and len(days.json()["periods"]) == 31
    assert [p["period"] for p in client.get("/ui/api/timeline", params=end).json()["periods"]] == ["9999-12"]
    first = client.get("/ui/api/timeline", params={"agent": "default", "from": "0001-01-01", "to": "0001-02"})
    assert [p["period"] for p in first.json()["periods"]] == ["0001-01", "0001-02"]


def test_the_page_ships_the_chart_script(client: TestClient) -> None:
    page = client.get("/ui/").text
    assert 'src="static/timeline.js"' in page and 'id="tl-chart"' in page
    script = client.get("/ui/static/timeline.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "http://www.w3.org/2000/svg" in script.text and "https://" not in script.text  # no library, no network
