"""Thai, Lao, Burmese and Khmer words are found by keywords, as Chinese ones are: those scripts write no space between
words either, so their runs are written as overlapping bigrams of letters (each with the vowel signs on it) in the
keyword text and the query (``domain/search/cjk.py``); ``doctor`` names and ``optimize`` writes anew the rows stored
without them, whatever the store's mark says."""

from __future__ import annotations

import re
import unicodedata

import pytest

from tiermem.base.config import Settings
from tiermem.base.records import KEYWORD_LINE
from tiermem.domain import maintenance
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.domain.search import cjk
from tiermem.domain.search.query import terms
from tiermem.store import KEYWORD_TEXT, KEYWORD_TEXT_VERSION

from .test_cjk_search import _keyword_hit

FACTS = [
    "ฉันแพ้ถั่วลิสง",  # I am allergic to peanuts
    "แม่ของฉันชอบกินข้าวเหนียวมะม่วง",  # my mother likes mango sticky rice
    "รถของฉันเป็นรถโตโยต้าสีขาว",  # my car is a white Toyota
    "ฉันทำงานที่โรงพยาบาลในเชียงใหม่",  # I work at a hospital in Chiang Mai
    "ลูกสาวของฉันชื่อมะลิ อายุเจ็ดขวบ",  # my daughter is called Mali, seven years old
    "พรุ่งนี้มีประชุมสำคัญตอนสิบโมง",  # tomorrow there is an important meeting at ten
    "รหัสไวไฟที่บ้านเขียนไว้หลังตู้เย็น",  # the home wifi password is written behind the fridge
    "ຂ້ອຍມັກກິນເຂົ້າໜຽວ",  # Lao: I like to eat sticky rice
    "ខ្ញុំចូលចិត្តញ៉ាំបាយ",  # Khmer: I like to eat rice
    "ကျွန်တော်ရန်ကုန်မှာနေတယ်",  # Burmese: I live in Yangon
    "The quarterly report is due on Friday.",
]
# each word a keyword search did not find before (the index cut each clause into pieces at its tone marks)
ASKED = {
    "แพ้ถั่ว": 0,
    "ข้าวเหนียว": 1,
    "โตโยต้า": 2,
    "รถ": 2,
    "โรงพยาบาล": 3,
    "เชียงใหม่": 3,
    "ลูกสาว": 4,
    "มะลิ": 4,
    "ประชุม": 5,
    "รหัสไวไฟ": 6,
    "ចូលចិត្ត": 8,
}


def test_a_thai_lao_burmese_or_khmer_word_is_found_by_keywords(settings: Settings) -> None:
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    for fact in FACTS:
        memory.archive.insert(agent, fact)
    for query, index in ASKED.items():
        assert _keyword_hit(memory, agent, query) == FACTS[index], query
    memory.archive.log_messages(
        agent, [{"role": "user", "content": "ฉันทำงานที่โรงพยาบาล"}, {"role": "assistant", "content": "เยี่ยมเลย"}]
    )
    hits = memory.archive.conversation_search(agent, "โรงพยาบาล", limit=3).hits
    assert hits and hits[0].content == "ฉันทำงานที่โรงพยาบาล" and hits[0].fts_rank == 1


def test_a_bigram_pairs_letters_with_their_vowel_signs_and_leaves_out_the_marks_the_index_splits_at() -> None:
    """A tone mark is neither a letter nor a digit to the full-text index, which splits words at it: "พ้ถั่" would be
    indexed as "พ" and "ถั", which match any Thai text. So a bigram pairs two letters, each with the vowel signs on it
    ("ถั"), without the tone marks; English text is unchanged."""
    assert cjk.keyword_text("ฉันแพ้ถั่วลิสง") == f"ฉันแพ้ถั่วลิสง{KEYWORD_LINE}ฉัน นแ แพ พถั ถัว วลิ ลิส สง"
    assert cjk.keyword_query("แพ้ถั่ว") == "แพ้ถั่ว แพ พถั ถัว"
    assert terms("แพ้ถั่ว") == ["แพ", "พถั", "ถัว"]  # coverage counts the same pieces
    # Burmese's asat and virama, Khmer's coeng: left out too; their punctuation ends a run as a space does
    assert cjk.keyword_text("ရန်ကုန်။ ភ្នំពេញ។")[-len("ရန နကု ကုန ភនំ នំពេ ពេញ") :] == "ရန နကု ကုန ភនំ នំពេ ពេញ"
    assert cjk.keyword_text("I like tea") == "I like tea" and terms("I like tea") == ["like", "tea"]


def test_the_classes_of_letters_marks_and_punctuation_follow_unicode() -> None:
    """Every letter or digit of the four blocks is a character of a run and pairs with the next letter in
    ``cjk.scripts`` (the line of bigrams holds such a pair), every combining mark of a run only (a keyword text's
    line may lack it), and no punctuation or symbol of either."""
    pair, run = re.compile(cjk.scripts()[1]), re.compile(cjk.CHARACTERS)
    for start, end in ((0x0E00, 0x0E7F), (0x0E80, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF)):
        for c in map(chr, range(start, end + 1)):
            kind = unicodedata.category(c)[0]
            if kind == "C":  # not assigned (in this Python's Unicode)
                continue
            assert (run.match(c) is not None) == (kind in "LMN"), f"U+{ord(c):04X}"
            assert (pair.fullmatch(c + "ก") is not None) == (kind in "LN"), f"U+{ord(c):04X}"


def _as_stored_before(memory: Memory, keyword: dict[str, str]) -> None:
    """Write the passages' keyword texts as an earlier tiermem stored them (``keyword``: content -> keyword text)."""
    store = memory.archive.store
    rows = store.rows.select("passages", None, limit=100)
    for r in rows:
        r["text"] = keyword.get(r["content"], r["text"])
    store.rows.upsert_rows("passages", "id", rows)


def test_doctor_names_and_optimize_regrams_rows_an_older_tiermem_stored_in_a_marked_store(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store carries the mark of the current keyword text (a new store, or one ``optimize`` regrammed), and an
    older tiermem then stores rows: a Chinese one without bigrams, a Thai one (no tiermem before wrote Thai bigrams),
    a Chinese and Thai one with the Chinese bigrams alone. ``doctor`` names them and ``optimize`` writes them anew;
    a row whose keyword text is as it should be is not named (one of such characters only past ``MAX_CHARS``, one
    of a stray tone mark alone, English)."""
    memory = open_memory(settings.model_copy(update={"max_content_chars": 2 * cjk.MAX_CHARS}))
    agent = memory.ensure_agent("default").id
    mixed = "我对花生过敏 ฉันแพ้ถั่วลิสง"
    old = {
        "我最喜欢的水果是榴莲": "我最喜欢的水果是榴莲",
        "รถของฉันเป็นรถโตโยต้าสีขาว": "รถของฉันเป็นรถโตโยต้าสีขาว",
        mixed: f"{mixed}{KEYWORD_LINE}我对 对花 花生 生过 过敏 我 对 花 生 过 敏",
    }
    fine = ["a " * (cjk.MAX_CHARS // 2) + "我对花生过敏", "\u0e48", "The quarterly report is due on Friday."]
    for text in [*old, *fine]:
        memory.archive.insert(agent, text)
    assert memory.archive.store.conn.meta()[KEYWORD_TEXT] == KEYWORD_TEXT_VERSION
    assert memory.archive.rows.stale_keyword_texts() == {}
    _as_stored_before(memory, old)
    stale = memory.archive.rows.stale_keyword_texts()
    assert sorted(stale) == ["passages"] and len(stale["passages"]) == 3
    assert maintenance.doctor(settings) == 1
    out = capsys.readouterr().out
    assert "keyword text" in out and "passages: 3" in out and "tiermem optimize" in out

    lines = maintenance.optimize(open_memory(settings))
    assert any("passages: 3 row(s)' keyword text written anew" in line for line in lines)
    memory = open_memory(settings)
    assert memory.archive.rows.stale_keyword_texts() == {}
    assert _keyword_hit(memory, agent, "โตโยต้า") == "รถของฉันเป็นรถโตโยต้าสีขาว"
    assert _keyword_hit(memory, agent, "แพ้ถั่ว") == mixed
    rows = memory.archive.rows.backup_rows("passages", vectors=False)
    assert all(r["text"] == cjk.keyword_text(r["content"]) for r in rows)
    maintenance.doctor(settings)
    assert "keyword text" not in capsys.readouterr().out


def test_marks_never_paired_leave_a_row_unnamed_and_thai_glued_to_chinese_is_named(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """A text whose only characters of those scripts are marks no line of bigrams holds (Japanese punctuation "・",
    "゠", sound marks) is not named by ``doctor``, which would otherwise fail forever (``optimize`` writes it the same).
    Thai glued to Chinese, as an older tiermem stored it (the Chinese bigrams, and the Thai letter glued to them as it
    is), is named and written anew."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    for text in ["Agenda: budget・hiring・roadmap", "゠ ゛゜ \u3099\u309a", "特斯拉ฉันแพ้"]:
        memory.archive.insert(agent, text)
    memory.archive.log_messages(agent, [{"role": "user", "content": "Agenda: budget・hiring"}])
    assert memory.archive.rows.stale_keyword_texts() == {}
    _as_stored_before(memory, {"特斯拉ฉันแพ้": f"特斯拉ฉันแพ้{KEYWORD_LINE}特斯 斯拉 特 斯 拉 ฉ"})
    assert [len(ids) for ids in memory.archive.rows.stale_keyword_texts().values()] == [1]
    assert maintenance.doctor(settings) == 1
    assert "passages: 1" in capsys.readouterr().out
    maintenance.optimize(open_memory(settings))
    assert open_memory(settings).archive.rows.stale_keyword_texts() == {}
    maintenance.doctor(settings)
    assert "keyword text" not in capsys.readouterr().out


def test_a_thai_lao_burmese_or_khmer_sentence_counts_about_its_words_not_one() -> None:
    """The ranker's ``length`` (``cjk.word_count``): a sentence of those scripts (no spaces between its words) counts
    about its words, from its letters, whether or not spaces part them; English and Chinese count as before."""
    sentences = [  # each word parted by "|"
        "ผม|ชอบ|กิน|ข้าว|ผัด|กับ|ไข่|ดาว",  # I like to eat fried rice with a fried egg
        "วันนี้|อากาศ|ดี|มาก",  # the weather is very good today
        "ฉัน|แพ้|ถั่ว|ลิสง",
        "แม่|ของ|ฉัน|ชอบ|กิน|ข้าว|เหนียว|มะม่วง",
        "ຂ້ອຍ|ມັກ|ກິນ|ເຂົ້າ|ໜຽວ",
        "ကျွန်တော်|ထမင်း|စား|ချင်|တယ်",  # Burmese: I want to eat rice
        "ខ្ញុំ|ចូលចិត្ត|ញ៉ាំ|បាយ",
    ]
    for sentence in sentences:
        words = sentence.split("|")
        for text in ("".join(words), " ".join(words)):
            counted = cjk.word_count(text)  # within a quarter of the words (one for a short sentence)
            assert abs(counted - len(words)) <= max(1, len(words) // 4), (text, counted, len(words))
    assert cjk.word_count("วันนี้อากาศดีมาก ผมชอบกินข้าวผัดกับไข่ดาว") == 4 + 7
    assert cjk.word_count("ก") == 1 and cjk.word_count("ฉันแพ้ถั่วลิสง, I said") == 3 + 2
    # as before: English by spaces, a Chinese or Japanese character half a word, a Korean word by spaces
    assert cjk.word_count("one two  three") == 3 and cjk.word_count("") == 0
    assert cjk.word_count("我对花生过敏") == 1 + 3 and cjk.word_count("妈妈の誕生日は八月八日です。") == 1 + 6
    assert cjk.word_count("저는 서울에서 살아요") == 3 and cjk.word_count("I like 猫 and 狗 a lot") == 7 + 1
