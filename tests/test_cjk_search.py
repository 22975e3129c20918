"""Chinese, Japanese and Korean words are found by keywords: their runs are written as overlapping bigrams in the
keyword text and the query (``domain/search/cjk.py``), English rows are stored as before, and a store whose rows
predate it is named by ``doctor`` and written anew by ``optimize``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tiermem.base.config import Settings
from tiermem.domain import maintenance, secret_audit
from tiermem.domain.archive import shape_message
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.domain.search import cjk
from tiermem.domain.search.query import terms
from tiermem.store import KEYWORD_TEXT

FACTS = [
    "我最喜欢的水果是榴莲，但是我太太讨厌它。",
    "我的护照号码放在书房的抽屉里。",
    "我对花生过敏，千万不要点宫保鸡丁。",
    "我的车是一辆白色的特斯拉，车牌是沪A12345。",
    "妈妈の誕生日は八月八日です。東京に住んでいます。",
    "저는 서울에서 살아요. 김치를 좋아해요.",
    "The quarterly report is due on Friday.",
]
ASKED = {
    "榴莲": 0,
    "过敏": 2,
    "特斯拉": 3,
    "沪A12345": 3,
    "A12345": 3,
    "妈妈的生日": 4,  # bigrams shared with the Japanese fact's "妈妈"
    "東京": 4,
    "誕生日": 4,
    "서울": 5,
    "김치": 5,
}


def _keyword_hit(memory: Memory, agent: str, query: str) -> str:
    hits = memory.archive.search(agent, query, top_k=3).hits
    found = [h for h in hits if h.fts_rank == 1]
    assert found, f"{query!r}: no keyword match in {[h.content for h in hits]}"
    return found[0].content


def test_a_chinese_japanese_or_korean_word_is_found_by_keywords(settings: Settings) -> None:
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    for fact in FACTS:
        memory.archive.insert(agent, fact)
    for query, index in ASKED.items():
        assert _keyword_hit(memory, agent, query) == FACTS[index], query
    # the turns of a conversation too ("서울" is attached to its particle: "서울에서")
    memory.archive.log_messages(
        agent, [{"role": "user", "content": "저는 서울에서 일해요"}, {"role": "assistant", "content": "좋네요!"}]
    )
    hits = memory.archive.conversation_search(agent, "서울", limit=3).hits
    assert hits and hits[0].content == "저는 서울에서 일해요" and hits[0].fts_rank is not None


def test_english_keyword_text_and_terms_are_unchanged() -> None:
    when = datetime(2024, 5, 8, tzinfo=UTC)
    assert shape_message("I like tea", when, "Do you?") == "08 May 2024. I like tea Do you?"
    assert cjk.keyword_text("café at 3.5 km") == "café at 3.5 km" and cjk.keyword_query("tea?") == "tea?"
    assert terms("What does Caroline like?") == ["caroline", "like"]
    assert cjk.word_count("one two  three") == 3
    # a Chinese clause: its bigrams count, and its characters half a word each
    assert terms("我对花生过敏") == ["我对", "对花", "花生", "生过", "过敏"]
    assert cjk.word_count("我对花生过敏") == 1 + 3


def test_doctor_names_rows_of_an_older_keyword_text_and_optimize_writes_them_anew(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, FACTS[0])
    memory.archive.insert(agent, FACTS[-1])
    store = memory.archive.store
    # as an older tiermem stored it: the keyword text without bigrams, and no mark
    rows = store.rows.select("passages", None, limit=100)
    for r in rows:
        r["text"] = cjk.base_of(r["text"])
    store.rows.upsert_rows("passages", "id", rows)
    store.conn.set_meta(KEYWORD_TEXT, "")
    assert memory.archive.rows.stale_keyword_texts() == {"passages": [rows[0]["id"]]}
    assert maintenance.doctor(settings) == 1
    out = capsys.readouterr().out
    assert "keyword text" in out and "passages: 1" in out and "tiermem optimize" in out
    assert all(h.fts_rank is None for h in memory.archive.search(agent, "榴莲", top_k=2).hits)

    lines = maintenance.optimize(open_memory(settings))
    assert any("passages: 1 row(s)' keyword text written anew" in line for line in lines)
    memory = open_memory(settings)
    assert memory.archive.rows.stale_keyword_texts() == {}
    assert _keyword_hit(memory, agent, "榴莲") == FACTS[0]
    assert not any("anew" in line for line in maintenance.optimize(memory))  # once
    maintenance.doctor(settings)
    assert "keyword text" not in capsys.readouterr().out


def test_a_new_store_is_marked_and_reads_no_row_for_it(settings: Settings) -> None:
    memory = open_memory(settings)
    assert memory.archive.store.conn.meta()[KEYWORD_TEXT] == "2"
    assert memory.archive.rows.stale_keyword_texts() == {}


def test_redacting_a_row_writes_its_bigrams_again_without_the_credential(settings: Settings) -> None:
    key, secret = "AKIA" + "Q3EGRIBFXPN7WMT4", "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "9aQ3rT7uLk"
    off = settings.model_copy(update={"secret_scan": "off"})
    memory = open_memory(off)
    agent = memory.ensure_agent("default").id
    # written glued to the Chinese words: the bigrams' line holds the key and the secret's last piece apart
    memory.archive.insert(agent, f"部署的密钥{key}别外传；aws_secret_access_key = {secret}别")
    audit = secret_audit.scan(open_memory(settings))
    # the content, the keyword text and its bigrams' line (the key; of the secret, its last piece alone: not found)
    assert audit.counts() == {"AWS access key": 3, "AWS secret access key": 2}
    secret_audit.doctor_secrets(settings, redact_found=True, yes=True)
    rows = open_memory(settings).archive.rows.backup_rows("passages", vectors=False)
    assert rows and not any(key in str(r) or "bPxRfiCY" in str(r) for r in rows)
    text = rows[0]["text"]
    assert "[redacted: AWS access key]" in text and cjk.keyword_text(cjk.base_of(text)) == text
