"""harness.commands.printable: names shown on a terminal as they are, never acted on by it."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.commands.printable import printable

ACTED_ON = ("Cc", "Cf", "Cs", "Zl", "Zp")


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("rope\x1b[31m", "rope\\x1b[31m"),  # ANSI colour (CSI)
        ("a\x1b]0;title\x07b", "a\\x1b]0;title\\x07b"),  # OSC: set the window title
        ("a\x1b]8;;http://x\x1b\\b", "a\\x1b]8;;http://x\\x1b\\b"),  # OSC 8 hyperlink, ST-terminated
        ("nul\x00", "nul\\x00"),
        ("over\rwrite", "over\\x0dwrite"),
        ("two\nlines", "two\\x0alines"),
        ("c1\x9bcsi", "c1\\x9bcsi"),  # the one-byte CSI
        ("abc\u202edcba", "abc\\u202edcba"),  # right-to-left override
        ("\u2066isolate\u2069", "\\u2066isolate\\u2069"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("line\u2028sep", "line\\u2028sep"),
        ("bad\udcffbyte", "bad\\udcffbyte"),  # an undecodable byte of a file name (surrogateescape)
        ("tag\U000e0041", "tag\\U000e0041"),  # a tag character
    ],
)
def test_characters_a_terminal_acts_on_are_escaped(name, shown):
    assert printable(name) == shown


@pytest.mark.parametrize("name", ["rope", "prism{paper}", "abacus+fire{max_k=50}", "rope → yarn×4", "ロープ", "a b"])
def test_printable_names_are_unchanged(name):
    assert printable(name) == name


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_nothing_a_terminal_acts_on_survives(s):
    shown = printable(s)
    assert not any(unicodedata.category(ch) in ACTED_ON for ch in shown)
    assert printable(shown) == shown  # idempotent: escaping twice changes nothing
    if s.isprintable():
        assert shown == s
