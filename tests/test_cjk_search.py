"""Chinese, Japanese and Korean words are found by keywords: their runs are written as overlapping bigrams in the
keyword text and the query (``domain/search/cjk.py``), English rows are stored as before, and a store whose rows
predate it is named by ``doctor`` and written anew by ``optimize``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from tiermem.base.config import Settings
from tiermem.base.records import KEYWORD_LINE
from tiermem.domain import maintenance, secret_audit
from tiermem.domain.archive import shape_message
from tiermem.domain.factory import open_memory
from tiermem.domain.forgetting import Target, forget
from tiermem.domain.memory import Memory
from tiermem.domain.search import cjk, sittings
from tiermem.domain.search.query import terms
from tiermem.store import KEYWORD_TEXT, KEYWORD_TEXT_VERSION, Filter

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


def _as_stored_before_bigrams(store: Any) -> list[dict[str, Any]]:
    """The store's passages as an older tiermem stored them: keyword texts without bigrams, and no mark; the rows."""
    rows = store.rows.select("passages", None, limit=100)
    for r in rows:
        r["text"] = cjk.base_of(r["text"])
    store.rows.upsert_rows("passages", "id", rows)
    store.conn.set_meta(KEYWORD_TEXT, "")
    return rows


def test_doctor_names_rows_of_an_older_keyword_text_and_optimize_writes_them_anew(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, FACTS[0])
    memory.archive.insert(agent, FACTS[-1])
    store = memory.archive.store
    # as an older tiermem stored it: the keyword text without bigrams, and no mark
    rows = _as_stored_before_bigrams(store)
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
    assert memory.archive.store.conn.meta()[KEYWORD_TEXT] == KEYWORD_TEXT_VERSION == "3"
    assert memory.archive.rows.stale_keyword_texts() == {}


def test_redacting_a_row_writes_its_bigrams_again_without_the_credential(settings: Settings) -> None:
    key, secret = "AKIA" + "Q3EGRIBFXPN7WMT4", "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "9aQ3rT7uLk"
    off = settings.model_copy(update={"secret_scan": "off"})
    memory = open_memory(off)
    agent = memory.ensure_agent("default").id
    # written glued to the Chinese words: the bigrams' line holds the key and the secret's last piece apart
    memory.archive.insert(agent, f"部署的密钥{key}别外传；aws_secret_access_key = {secret}别")
    audit = secret_audit.scan(open_memory(settings))
    # the content, its keyword text and that text's bigrams' line hold the key (of the secret, the line holds its last
    # piece alone): one credential of each, in one row, counted once
    assert audit.counts() == {"AWS access key": 1, "AWS secret access key": 1}
    assert [f.where.rsplit(" ", 1)[-1] for f in audit.found] == ["(content)"]
    secret_audit.doctor_secrets(settings, redact_found=True, yes=True)
    rows = open_memory(settings).archive.rows.backup_rows("passages", vectors=False)
    assert rows and not any(key in str(r) or "bPxRfiCY" in str(r) for r in rows)
    text = rows[0]["text"]
    assert "[redacted: AWS access key]" in text and cjk.keyword_text(cjk.base_of(text)) == text


TURN = (
    "我今天早上七点就起床了，因为要赶八点的地铁去公司。最近公司的项目特别多，每天都要加班到晚上九点多。"
    "我们部门下个月要搬到新的办公楼，在浦东那边。老板说这个季度的销售目标必须完成，不然年终奖会受影响。"
    "明天上午十点有一个很重要的会议，我还没有准备好材料。你能帮我把这份报告翻译成英文吗？客户明天就要看。"
)


def test_the_sittings_count_a_chinese_turn_as_a_few_dozen_words_and_still_rank_by_them() -> None:
    """The sittings index counts each bigram of a turn once, and at most ``GRAMS`` of them: a 150-character turn is
    not 150 words (the first search of a store of Chinese turns builds the index from every turn)."""
    assert len(terms(TURN)) > 120  # the keyword text's and the ranker's coverage: every bigram
    counted = sittings.stems(TURN)
    assert len(counted) == len(set(counted)) == sittings.GRAMS
    assert sittings.stems("Caroline went dancing") == ["carolin", "went", "danc"]  # English as before
    assert sittings.stems("我的iPhone坏了") == ["我的", "iphon", "坏了"]
    index = sittings.SittingIndex()
    hour = 3_600_000_000
    index.add(
        [
            {"content": "我对花生过敏，千万不要点宫保鸡丁。", "conversation_id": "c", "created_us": 0, "seq": 0},
            {"content": TURN, "conversation_id": "c", "created_us": 1, "seq": 1},
            {"content": "我最喜欢的水果是榴莲。", "conversation_id": "c", "created_us": 3 * hour, "seq": 2},
            {"content": TURN, "conversation_id": "c", "created_us": 3 * hour + 1, "seq": 3},
        ]
    )
    assert len(index.sittings) == 2
    assert index.ranks("花生过敏") == {0: 1} and index.ranks("榴莲") == {1: 1}


def test_a_long_text_is_written_as_bigrams_for_its_first_max_chars_characters_only() -> None:
    """A row of millions of characters: its keyword text is not six times as long, nor its terms a list of as many
    bigrams as it has characters; the words after ``MAX_CHARS`` count whole, as before bigrams."""
    head = "我对花生过敏。" * (cjk.MAX_CHARS // 7)  # 5 characters short of MAX_CHARS
    text = head + "榴莲很好吃了吗。特斯拉停在车库。"  # its first MAX_CHARS characters end with "榴莲很好吃"
    keyword = cjk.keyword_text(text)
    line = keyword.rpartition(KEYWORD_LINE)[2].split()
    assert cjk.base_of(keyword) == text and line[-1] == "吃" and "好吃" in line and "吃了" not in line
    assert len(keyword) < len(text) + 5 * cjk.MAX_CHARS
    assert cjk.keyword_query(text).split()[-1] == "好吃"
    counted = terms(text)  # the word across the MAX_CHARS-th character as bigrams, the words after it whole
    assert counted[-2:] == ["了吗", "特斯拉停在车库"] and counted.count("花生") == cjk.MAX_CHARS // 7
    assert cjk.word_count(text) == 1 + len(text.replace("。", "")) // 2


def test_doctor_asks_the_store_for_the_rows_of_an_older_keyword_text(settings: Settings) -> None:
    """The rows holding such a character and no line of bigrams are found by the store's own filter (ids only: no
    row's text is read into the process), whatever the script (Han of the supplementary planes, kana, Hangul)."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    texts = ["English only", "我对花生过敏", "𠀀𠀁 rare Han", "東京に住んでいます", "서울에서 살아요"]
    for text in texts:
        memory.archive.insert(agent, text)
    store = memory.archive.store
    rows = store.rows.select("passages", None, limit=100)
    old = [r for r in rows if r["content"] != "English only"][:3]
    for r in old:
        r["text"] = cjk.base_of(r["text"])
    store.rows.upsert_rows("passages", "id", old)
    where = Filter(lines_lacking=(cjk.MAX_CHARS, cjk.scripts()))
    assert sorted(r["id"] for r in store.conn.rows("passages", where, columns=("id",))) == sorted(r["id"] for r in old)
    store.conn.set_meta(KEYWORD_TEXT, "")
    stale = memory.archive.rows.stale_keyword_texts()
    assert {table: sorted(ids) for table, ids in stale.items()} == {"passages": sorted(r["id"] for r in old)}


def test_optimize_writes_keyword_texts_anew_without_bringing_back_a_row_forgotten_meanwhile(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process forgets a row after ``regram`` read it and before it writes: the row stays forgotten (the
    keyword texts are updated, never inserted)."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    kept_id, gone_id = (memory.archive.insert(agent, fact)[0] for fact in FACTS[:2])
    store = memory.archive.store
    _as_stored_before_bigrams(store)
    writing = store.conn.writing

    @contextmanager
    def forgotten_elsewhere_first(table: str) -> Iterator[None]:
        if table == "passages" and gone_id not in forgotten:  # once: another process, between the read and the write
            forgotten.append(gone_id)
            forget(open_memory(settings), Target("passage", agent, gone_id))
        with writing(table):
            yield

    forgotten: list[str] = []
    monkeypatch.setattr(store.conn, "writing", forgotten_elsewhere_first)
    memory.archive.rows.regram()
    assert forgotten == [gone_id]
    left = open_memory(settings).archive.rows.backup_rows("passages", vectors=False)
    assert [r["id"] for r in left] == [kept_id] and left[0]["text"] == cjk.keyword_text(FACTS[0])


def test_forget_text_matches_what_a_row_holds_not_its_line_of_bigrams(settings: Settings) -> None:
    """The bigrams' line writes apart the letters glued to Chinese words ("用户名admin密码" -> "... admin 密码 ..."):
    a forget of "admin 密码" forgets the rows holding that text, not one holding "admin密码"."""
    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    agent = memory.ensure_agent("default").id
    glued = "服务器用户名admin密码在保险箱里"
    memory.archive.insert(agent, glued)
    spaced = memory.archive.insert(agent, "路由器的 admin 密码 写在背面")[0]
    holding = memory.archive.rows.rows_where("passages", Filter(agent_id=agent, containing="admin 密码"))
    assert [r["id"] for r in holding] == [spaced]
    forget(memory, Target("text", agent, "admin 密码"))
    assert [r["content"] for r in memory.archive.rows.backup_rows("passages", vectors=False)] == [glued]


def _named(text: str) -> bool:
    """Whether the store's filter of keyword texts lacking their bigrams (``Filter.lines_lacking`` with
    ``cjk.scripts``) names ``text``, in Python (the expressions are read alike by ``re`` and LanceDB)."""
    return any(
        re.search(e, text[: cjk.MAX_CHARS]) and not re.search(KEYWORD_LINE + "[^\\n]*" + e, text) for e in cjk.scripts()
    )


def test_no_keyword_text_written_now_is_named_as_lacking_its_bigrams_whatever_its_characters() -> None:
    """Every code point of the scripts written as bigrams (``cjk.CHARACTERS``: their letters, and their marks and
    punctuation, "・", "゠", "゛", U+3099, unassigned ones), alone, between letters of each group and doubled: the
    keyword text written now is never named stale, else ``doctor`` would fail forever on it and ``optimize`` write it
    anew the same. Letters of each group are named when their line is missing."""
    run = re.compile(cjk.CHARACTERS)
    named = [
        f"U+{p:04X}"
        for p in range(0x110000)
        if run.match(chr(p)) and _named(cjk.keyword_text(f"x{chr(p)} ก{chr(p)}ข 中{chr(p)} {chr(p) * 2}"))
    ]
    assert not named, named[:20]
    assert all(_named(text) for text in ("中", "𠀀", "か", "한", "ถั่ว", "ສະບາຍ"))
    assert not any(_named(text) for text in ("・", "ก", "\u0e48", "English"))  # a Thai letter alone: no pair to write


def test_a_one_character_chinese_or_korean_word_is_found_and_counted_relevant(tmp_path: Any) -> None:
    """A word of one character ("猫" cat, "개" dog) is a word of its own in Chinese and Korean: the keyword leg finds
    it inside a longer run (its character is written alone), and the ranking counts it found as the keyword leg does,
    so the hit is relevant, as one of a one-letter English word ("C") is: above ``auto_recall_threshold``. It was
    found but counted absent (its row's words are bigrams): relevance ~0.01. A one-letter English word that is a
    stopword ("a", "I") is no keyword match, as ever. With the packaged model."""
    from tiermem.base.config import load_settings

    settings = load_settings(data_dir=tmp_path / "data", embedding_model="default")
    memory = open_memory(settings)
    assert memory.archive.embedder.wait(120)
    agent = memory.ensure_agent("default").id
    facts = [
        "我家有一只猫，它叫咪咪。",
        "猫が好きです。",
        "나는 개를 좋아해",
        "I learned C in school.",
        "Plan A failed.",
    ]
    for fact in facts:
        memory.archival_insert(agent, fact, None)
    for query, want in (("猫", {0, 1}), ("개", {2}), ("C", {3})):
        result = memory.archival_search(
            agent, query, tags=None, tag_match_mode="any", top_k=5, start_datetime=None, end_datetime=None
        )
        found = {h.content: h.relevance for h in result.hits if h.fts_rank is not None}
        assert set(found) == {facts[i] for i in want}, (query, result.hits)
        assert min(found.values()) > settings.auto_recall_threshold, (query, found)
    for query in ("a", "I"):
        hits = memory.archive.search(agent, query, top_k=5).hits
        assert all(h.fts_rank is None for h in hits), (query, hits)
    memory.archive.log_messages(agent, [{"role": "user", "content": "我的猫很可爱"}])
    hits = memory.archive.conversation_search(agent, "猫", limit=3).hits
    assert hits[0].content == "我的猫很可爱" and hits[0].relevance > settings.auto_recall_threshold, hits
