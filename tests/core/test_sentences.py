"""The one sentence splitter (``shopping_companion/sentences.py``): abbreviations and a kept value
are not cut, everything else is, and no module keeps a splitter of its own."""

from __future__ import annotations

import re
from pathlib import Path

from shopping_companion.sentences import ends_sentence, separate_run_together, split_sentences

PACKAGE = Path(__file__).resolve().parents[2] / "shopping_companion"


def test_abbreviations_and_initialisms_do_not_end_a_sentence():
    for brand in ["U.S. Polo Assn.", "Dr. Martens", "St. John", "Levi Strauss & Co. Jeans", "Chanel No. 5"]:
        assert split_sentences(brand) == [brand]
    assert split_sentences("I wear U.S. Polo Assn. shirts. Dr. Martens too!") == [
        "I wear U.S. Polo Assn. shirts.",
        "Dr. Martens too!",
    ]


def test_sentence_ends_line_breaks_and_semicolons():
    assert split_sentences("Nice. Good.") == ["Nice.", "Good."]
    assert split_sentences("Size M. Love it") == ["Size M.", "Love it"]  # one letter is no initialism
    assert split_sentences("No. I said no") == ["No.", "I said no"]  # "No." only before a number
    assert split_sentences("one\n\ntwo  ") == ["one", "two"]
    assert split_sentences("black; no white") == ["black; no white"]
    assert split_sentences("black; no white", semicolons=True) == ["black;", "no white"]
    assert split_sentences("") == [] and split_sentences(" \n ") == []


def test_a_kept_value_is_never_split():
    text = "The brand is Pat. Pending Co. I like it."
    assert split_sentences(text) == ["The brand is Pat.", "Pending Co. I like it."]
    assert split_sentences(text, "pat. pending") == ["The brand is Pat. Pending Co. I like it."]


def test_ends_sentence():
    assert ends_sentence("Nice.") and ends_sentence("Love it!") and ends_sentence("Really?")
    assert not ends_sentence("U.S. Polo Assn.") and not ends_sentence("Dr.") and not ends_sentence("black")
    assert not ends_sentence("")


def test_no_module_keeps_its_own_sentence_splitter():
    own = re.compile(r"re\.(?:compile|split)\(r?[\"'][^\"']*\(\?<=\[\.!\?")
    found = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "sentences.py" and own.search(p.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_sentences_run_together_are_separated_and_camel_case_names_are_not():
    text = "secured with a TSA lockOne handle on the top and four 360 degree-wheelsTwo main compartments"
    assert split_sentences(separate_run_together(text)) == [
        "secured with a TSA lock.",
        "One handle on the top and four 360 degree-wheels.",
        "Two main compartments",
    ]
    names = "iPhone ThinkPad PlayStation eBay macOS YouTube McDonald"
    assert separate_run_together(names) == names
