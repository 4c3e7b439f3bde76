"""The scrubber decodes what an upstream echoed before it matches: each form a real upstream
uses (tests/support/echoes.py) loses the value, whatever surrounds it."""

from __future__ import annotations

import base64
import string

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.tools.scrub import Scrubber
from tests.support.echoes import ALL_FORMS, LEAKED_FORMS, leaks

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


def test_an_asp_net_echo_of_a_secret_is_redacted() -> None:
    echoed = '{"error": "bad key wJalrXUtnFEMI/K7MDENG\\u002BbPxRfiCYEXAMPLEKEY"}'
    assert Scrubber([AWS_SECRET])(echoed) == '{"error": "bad key [redacted]"}'


@pytest.mark.parametrize("form", list(LEAKED_FORMS))
def test_every_form_that_used_to_leak_is_caught(form: str) -> None:
    encode, value = LEAKED_FORMS[form]
    text = f"upstream said: {encode(value)} (end)"
    assert leaks(value, text)  # the oracle sees the value before scrubbing...
    scrubbed = Scrubber([value])(text)
    assert not leaks(value, scrubbed), scrubbed  # ...and not after
    assert scrubbed.startswith("upstream said: ") and scrubbed.endswith(" (end)")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Only the span that held the value goes, escapes around it stay as they were.
        ("a\\u0026b zq1/x+y\\u002Fz c&amp;d", "a\\u0026b [redacted] c&amp;d"),
        ("%41%42 zq1%2Fx%2By%2fz %43", "%41%42 [redacted] %43"),
        ("x%E2%82%AC%7A%71%31/x+y/z%E2%82%AC", "x%E2%82%AC[redacted]%E2%82%AC"),
        ("zq1%252Fx%252By%252Fz!", "[redacted]!"),
        ('"{\\"k\\": \\"zq1\\\\/x+y\\\\/z\\"}"', '"{\\"k\\": \\"[redacted]\\"}"'),
    ],
)
def test_the_original_span_is_replaced(text: str, expected: str) -> None:
    assert Scrubber(["zq1/x+y/z"])(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A header a server read as Latin-1 (or windows-1252), echoed raw, JSON-escaped,
        # percent-encoded or read so twice: only its span goes, Latin-1 text around it stays.
        ("café JosÃ©-zq1/x Ã© é", "café [redacted] Ã© é"),
        ('{"h": "Jos\\u00c3\\u00a9-zq1\\/x"}', '{"h": "[redacted]"}'),
        ("Jos%C3%83%C2%A9-zq1%2Fx!", "[redacted]!"),
        ("JosÃ\x83Â©-zq1/x!", "[redacted]!"),
        ("a\xe9b JosÃ©-zq1/x", "a\xe9b [redacted]"),
    ],
)
def test_a_value_misread_by_a_single_byte_code_page_is_found(text: str, expected: str) -> None:
    assert Scrubber(["José-zq1/x"])(text) == expected


def test_text_without_hidden_values_is_unchanged() -> None:
    text = '{"a": "caf\\u00e9 &amp; 100%25 \\"quoted\\"", "b": "Zm9vYmFy", "c": "666f6f"}'
    assert Scrubber(["zq1/x+y/z"])(text) == text


def test_values_that_overlap_in_the_text_are_both_removed() -> None:
    scrub = Scrubber(["abcdef-1234", "1234-ghijkl"])
    assert scrub("x abcdef-1234-ghijkl y") == "x [redacted] y"
    assert scrub("x abcdef\\u002d1234%2Dghijkl y") == "x [redacted] y"


# Values with the characters encoders treat specially (and beyond the BMP); surroundings that
# cannot join an escape (no `\`, `%`, `&`), so the value is really in the text.
VALUES = st.text(
    st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("/+=&'\"<>%\\ ~()"),
    min_size=8,
    max_size=40,
)
AROUND = st.text(string.ascii_letters + string.digits + " .,:;{}[]", max_size=30)


@settings(max_examples=300, deadline=None)
@given(value=VALUES, form=st.sampled_from(sorted(ALL_FORMS)), before=AROUND, after=AROUND)
@example(value=AWS_SECRET, form=".NET \\u002B", before="", after="")
def test_a_value_never_survives_any_form(value: str, form: str, before: str, after: str) -> None:
    text = f"{before} {ALL_FORMS[form](value)} {after}"
    scrub = Scrubber([value])
    scrubbed = scrub(text)
    assert not leaks(value, scrubbed), (text, scrubbed)
    for limit in (len(before) + 3, len(text) // 2):  # the head before a cut: the same text
        assert scrubbed.startswith(scrub.head(text, limit)), (text, limit)


# Forms a reader undoes without knowing the value (the rest hold it in base64 or hex).
TEXTUAL = sorted(name for name in ALL_FORMS if "base64" not in name and not name.startswith("hex"))


@settings(max_examples=300, deadline=None)
@given(
    value=VALUES,
    inner=st.sampled_from(sorted(ALL_FORMS)),
    outer=st.sampled_from(TEXTUAL),
    before=AROUND,
)
@example(  # found by a run: `\\` decoded before a `\u0026` kept for later read as `\\u0026`
    value="000000\\&", inner="go encoding/json", outer="%XX on every byte", before=""
)
def test_a_value_never_survives_a_textual_form_of_any_form(
    value: str, inner: str, outer: str, before: str
) -> None:
    text = ALL_FORMS[outer](f"{before} {ALL_FORMS[inner](value)}.")
    scrubbed = Scrubber([value])(text)
    assert not leaks(value, scrubbed), (text, scrubbed)


def test_a_backslash_before_an_escape_kept_for_later_stays_with_it() -> None:
    """JSON `\\\\\\u0026` is a backslash and an `&`: decoding the backslash now and the
    `&` (another family's marker) on a later pass made `\\\\u0026` in between, which reads
    as a backslash escape and the text `u0026`, and `\\&` never showed in any layer."""
    scrub = Scrubber(["x-000000\\&"])
    assert scrub("a x-000000\\\\\\u0026 b") == "a [redacted] b"
    assert scrub("a x-000000\\u0026 b") == "a x-000000\\u0026 b"  # `\u0026` is `&` alone


@pytest.mark.parametrize("value", ["ª¼¥§Ì§", "\ud800lone-surrogate", "ÿÿÿÿÿÿÿÿ", "a" * 8])
def test_any_value_and_text_are_handled(value: str) -> None:
    """Whatever a caller sends as a value, and whatever an upstream answers: never an error."""
    scrub = Scrubber([value])
    for text in (value, f"%FF%C3 {value} \\ud800 &#1114112; &#0; &bogus; \\u12", "%" * 5):
        assert value not in scrub(text)


def test_json_results_are_scrubbed_string_by_string_and_images_are_withheld_whole() -> None:
    scrub = Scrubber(["s3cr3t-value"])
    clean_png = base64.b64encode(b"\x89PNG pixels").decode()
    leaky_png = base64.b64encode(b"\x89PNG s3cr3t-value").decode()
    result = {
        "content": [
            {"type": "text", "text": "s3cr3t-value says hi"},
            {"type": "image", "data": clean_png, "mimeType": "image/png"},
            {"type": "audio", "data": leaky_png, "mimeType": "audio/wav"},
            {"type": "image", "data": "not base64 at all!", "mimeType": "image/png"},
        ],
        "structuredContent": {"s3cr3t-value": ["s3cr3t-value", 1, None, True]},
    }
    text, image, audio, odd = scrub.json(result)["content"]
    assert text["text"] == "[redacted] says hi"
    assert image["data"] == clean_png  # untouched, byte for byte
    assert audio == {"type": "text", "text": "[audio withheld: [redacted] in it]"}
    assert odd["data"] == "not base64 at all!"
    assert scrub.json(result)["structuredContent"] == {"[redacted]": ["[redacted]", 1, None, True]}


def test_json_deeper_than_the_limit_is_cut_not_walked() -> None:
    deep: object = "s3cr3t-value"
    for _ in range(5000):  # past Python's recursion limit if it were walked
        deep = [deep]
    cut = Scrubber(["s3cr3t-value"]).json({"structuredContent": deep})
    assert "s3cr3t-value" not in repr(cut)


def test_prepared_values_are_shared_per_set_of_texts_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`HiddenValues.of` (what a `Scrubber` uses) prepares the same texts once: the same forms
    as a fresh preparation, whatever the order or type of the values given; at most
    `PREPARED_KEPT` sets are kept."""
    from app.kit import hidden

    # From empty: what earlier tests of this worker prepared (and their evictions) stays out.
    monkeypatch.setattr(hidden, "_prepared", {})
    monkeypatch.setattr(hidden, "_by_strings", {})

    value = "sk-abcdef0123"
    first = hidden.HiddenValues.of([value, "user-12345", 7])
    again = hidden.HiddenValues.of(["user-12345", 7, value])
    fresh = hidden.HiddenValues([value, "user-12345", 7])
    assert again is first
    assert (first.plain, first.packed, first.reach) == (fresh.plain, fresh.packed, fresh.reach)
    assert Scrubber([value]).values is hidden.HiddenValues.of([value])
    assert Scrubber([value])(f"key={value}") == "key=[redacted]"
    assert hidden.HiddenValues.of([]) is hidden.HiddenValues.of(["abc"])  # too short: none
    for index in range(hidden.PREPARED_KEPT + 10):
        hidden.HiddenValues.of([f"value-{index:04d}"])
    assert len(hidden._prepared) == hidden.PREPARED_KEPT
    assert hidden.HiddenValues.of([value, "user-12345", 7]) is not first  # the oldest went
    large = "v" * (hidden.PREPARED_MAX_CHARS + 1)  # prepared for its request, never kept
    kept = len(hidden._prepared)
    assert hidden.HiddenValues.of([large]) is not hidden.HiddenValues.of([large])
    assert len(hidden._prepared) == kept
    assert Scrubber([large])(f"x{large}y") == "x[redacted]y"
    assert len(hidden._by_strings) == hidden.PREPARED_KEPT  # lists of strings: bounded too


def test_a_list_of_strings_finds_its_prepared_set_as_given() -> None:
    """Strings as given skip taking their texts again: the same set as their texts find, and
    a Basic credential among them still hidden decoded too."""
    from app.kit import hidden

    basic = base64.b64encode(b"user:hunter2-pass").decode()  # a Basic credential, stored
    given = ["sk-abcdef0123", basic, "abc"]
    first = hidden.HiddenValues.of(given)
    assert hidden.HiddenValues.of(list(given)) is first
    assert hidden.HiddenValues.of(tuple(given)) is first
    assert hidden.HiddenValues.of([basic, "sk-abcdef0123"]) is first  # the same texts
    assert first.plain == hidden.HiddenValues(given).plain
    assert Scrubber(given)("token user:hunter2-pass") == "token [redacted]"
