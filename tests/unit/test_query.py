"""Query options, path IDs, prefixes and tokens: parsed as Nomad parses them, with its texts."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import MultiDict

from allocbridge.api.errors import NomadError
from allocbridge.api.ids import InvalidUUIDError, decode_uuid_text, parse_alloc_id, parse_prefix
from allocbridge.api.query import (
    DEFAULT_WAIT,
    QueryOptions,
    StubFields,
    parse_bool_option,
    parse_query,
    parse_stub_fields,
    wants_pretty,
)
from allocbridge.auth import extract_token
from allocbridge.model.goformat import go_quote, go_unicode

ALLOC = "8c3d9a1f-6b1e-4d9a-9f0e-2c1b7a6d5e4f"


def q(*pairs: tuple[str, str]) -> MultiDict[str]:
    return MultiDict(pairs)


def error_of(*pairs: tuple[str, str]) -> tuple[int, str]:
    with pytest.raises(NomadError) as caught:
        parse_query(q(*pairs))
    return caught.value.status, caught.value.message


# -- the common options -------------------------------------------------------------------------


def test_defaults() -> None:
    options = parse_query(q())
    assert options == QueryOptions()
    assert options.namespace == "default"
    assert options.wait == DEFAULT_WAIT == 300.0
    assert not options.blocking


def test_every_option() -> None:
    options = parse_query(
        q(
            ("region", "global"),
            ("stale", ""),
            ("prefix", "ab"),
            ("namespace", "team-a"),
            ("per_page", "25"),
            ("next_token", "1003.x"),
            ("filter", 'ClientStatus == "running"'),
            ("reverse", "true"),
            ("wait", "1m30s"),
            ("index", "42"),
            ("pretty", ""),
        )
    )
    assert options == QueryOptions(
        region="global",
        stale=True,
        prefix="ab",
        namespace="team-a",
        per_page=25,
        next_token="1003.x",
        filter='ClientStatus == "running"',
        reverse=True,
        wait=90.0,
        index=42,
    )
    assert options.blocking


@pytest.mark.parametrize(("value", "expected"), [("", True), ("true", True), ("0", False)])
def test_stale(value: str, expected: bool) -> None:
    assert parse_query(q(("stale", value))).stale is expected


def test_empty_namespace_is_default() -> None:
    assert parse_query(q(("namespace", ""))).namespace == "default"
    assert parse_query(q(("namespace", "*"))).namespace == "*"


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("True", False), ("1", False)])
def test_reverse_is_only_the_exact_word_true(value: str, expected: bool) -> None:
    assert parse_query(q(("reverse", value))).reverse is expected


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("10s", 10.0),
        ("300000ms", 300.0),
        ("1500ms", 1.5),
        ("0.5h", 300.0),  # capped at 5 minutes
        ("10m", 300.0),
        ("0", 300.0),  # zero means the default
        ("-5s", 300.0),  # so does a negative wait
        ("2562047h", 300.0),  # the largest hours Go's time.Duration holds: capped
        ("2500000\u00b5s", 2.5),  # Go takes the micro sign
        ("2500000\u03bcs", 2.5),  # and the Greek mu
    ],
)
def test_wait_defaults_and_cap(value: str, seconds: float) -> None:
    assert parse_query(q(("wait", value))).wait == pytest.approx(seconds)


@pytest.mark.parametrize(("value", "pretty"), [("", True), ("1", True), ("0", False)])
def test_pretty(value: str, pretty: bool) -> None:
    assert wants_pretty(q(("pretty", value))) is pretty
    assert wants_pretty(q()) is False


def test_per_page_bounds() -> None:
    assert parse_query(q(("per_page", "-3"))).per_page == -3  # accepted, as Nomad does
    assert parse_query(q(("per_page", "2147483647"))).per_page == 2**31 - 1
    assert parse_query(q(("per_page", ""))).per_page == 0


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ((("stale", "maybe"),), "Expect `true` or `false` for `stale` query string parameter"),
        ((("per_page", "abc"),), "Expect a number for `per_page` query string parameter"),
        ((("per_page", "1.5"),), "Expect a number for `per_page` query string parameter"),
        ((("per_page", "2147483648"),), "Expect a number for `per_page` query string parameter"),
        ((("per_page", "1_0"),), "Expect a number for `per_page` query string parameter"),
        ((("wait", "5"),), "Invalid wait time"),
        ((("wait", "5 m"),), "Invalid wait time"),
        ((("wait", "\u0665s"),), "Invalid wait time"),
        ((("wait", "9999999h"),), "Invalid wait time"),  # beyond Go's time.Duration
        ((("wait", "9223372036854775808ns"),), "Invalid wait time"),
        ((("index", "-1"),), "Invalid index"),
        ((("index", "+1"),), "Invalid index"),
        ((("index", "x"),), "Invalid index"),
        ((("index", str(2**64)),), "Invalid index"),
        # Nomad's order: stale, per_page, wait, index.
        ((("index", "x"), ("wait", "x"), ("per_page", "x"), ("stale", "x")), "Expect `true`"),
        ((("index", "x"), ("wait", "x"), ("per_page", "x")), "Expect a number"),
        ((("index", "x"), ("wait", "x")), "Invalid wait time"),
    ],
)
def test_errors(pairs: tuple[tuple[str, str], ...], message: str) -> None:
    status, text = error_of(*pairs)
    assert status == 400
    assert text.startswith(message)


def test_largest_index_is_accepted() -> None:
    assert parse_query(q(("index", str(2**64 - 1)))).index == 2**64 - 1


# -- booleans -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1", "t", "T", "TRUE", "true", "True"])
def test_go_true(value: str) -> None:
    assert parse_bool_option(q(("resources", value)), "resources") is True


@pytest.mark.parametrize("value", ["0", "f", "F", "FALSE", "false", "False"])
def test_go_false(value: str) -> None:
    assert parse_bool_option(q(("resources", value)), "resources") is False


def test_absent_or_empty_bool_is_unset() -> None:
    assert parse_bool_option(q(), "resources") is None
    assert parse_bool_option(q(("resources", "")), "resources") is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "maybe",
            'Failed to parse value of "resources" (maybe) as a bool: '
            'strconv.ParseBool: parsing "maybe": invalid syntax',
        ),
        (
            'ye"s\n',
            'Failed to parse value of "resources" (ye"s\n) as a bool: '
            'strconv.ParseBool: parsing "ye\\"s\\n": invalid syntax',
        ),
    ],
)
def test_bad_bool_text(value: str, message: str) -> None:
    with pytest.raises(NomadError) as caught:
        parse_bool_option(q(("resources", value)), "resources")
    assert caught.value.status == 400
    assert caught.value.message == message


def test_stub_fields() -> None:
    assert parse_stub_fields(q()) == StubFields(task_states=True, resources=False)
    assert parse_stub_fields(q(("resources", "true"))) == StubFields(True, True)
    assert parse_stub_fields(q(("task_states", "false"))) == StubFields(False, False)
    with pytest.raises(NomadError, match="task_states"):
        parse_stub_fields(q(("task_states", "no")))
    with pytest.raises(NomadError, match="resources"):  # resources is parsed first
        parse_stub_fields(q(("task_states", "no"), ("resources", "no")))


# -- Go formatting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("abc", '"abc"'),
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("tab\there\n", '"tab\\there\\n"'),
        ("\x00\x7f", '"\\x00\\x7f"'),
        ("é ü", '"é ü"'),
        ("\u00a0", '"\\u00a0"'),
        ("\U000e0001", '"\\U000e0001"'),
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (0x67, "U+0067 'g'"),
        (0x7A, "U+007A 'z'"),
        (0x20, "U+0020 ' '"),
        (0x0A, "U+000A"),
        (0xC3, "U+00C3 'Ã'"),
    ],
)
def test_go_unicode(code: int, text: str) -> None:
    assert go_unicode(code) == text


# -- IDs and prefixes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "full", "reason"),
    [
        ("8c3d9a1f", True, "UUID must be 36 characters"),
        ("", True, "UUID must be 36 characters"),
        (ALLOC + "0", True, "UUID must be 36 characters"),
        ("8c3d9a1f-6b1e-4d9a-9f0e-2c1b7a6d5e4" + "é", True, "UUID must be 36 characters"),
        ("a" * 37, False, "Invalid UUID length. UUID have 36 characters; got 37"),
        ("a-b-c-d-e-f", False, 'UUID should have maximum of 4 "-"; got 5'),
        ("abc", False, "Input (without hyphens) must be even length"),
        ("ab-c", False, "Input (without hyphens) must be even length"),
        ("zz", False, "Invalid UUID: encoding/hex: invalid byte: U+007A 'z'"),
        ("abgh", False, "Invalid UUID: encoding/hex: invalid byte: U+0067 'g'"),
        ("\u00e9", False, "Invalid UUID: encoding/hex: invalid byte: U+00C3 'Ã'"),
        (
            "8c3d9a1f-6b1e-4d9a-9f0e-2c1b7a6d5e4g",
            True,
            "Invalid UUID: encoding/hex: invalid byte: U+0067 'g'",
        ),
        # Order: length, then hyphens, then even length, then hex.
        ("g-g-g-g-g-g", False, 'UUID should have maximum of 4 "-"; got 5'),
        ("ggg", False, "Input (without hyphens) must be even length"),
    ],
)
def test_uuid_errors(text: str, full: bool, reason: str) -> None:
    with pytest.raises(InvalidUUIDError) as caught:
        decode_uuid_text(text, full=full)
    assert str(caught.value) == reason


def test_path_id_errors_are_400_with_nomads_text() -> None:
    with pytest.raises(NomadError) as caught:
        parse_alloc_id("8c3d9a1f")
    assert caught.value.status == 400
    assert caught.value.message == "alloc lookup failed: index error: UUID must be 36 characters"


def test_path_ids_are_compared_as_bytes() -> None:
    assert parse_alloc_id(ALLOC) == ALLOC
    assert parse_alloc_id(ALLOC.upper()) == ALLOC
    moved = ALLOC.replace("-", "")
    moved = f"{moved[:4]}-{moved[4:8]}-{moved[8:20]}-{moved[20:24]}-{moved[24:]}"
    assert parse_alloc_id(moved) == ALLOC
    # 36 characters, well-formed, but 17 bytes: matches nothing.
    assert parse_alloc_id("8c3d9a1f-6b1e4d9a-9f0e2c1b7a6d5e4faa") is None


def test_prefixes() -> None:
    assert parse_prefix("AB") == "ab"
    assert parse_prefix("8c3d9a1f-6b") == "8c3d9a1f6b"
    assert parse_prefix("-") == ""
    with pytest.raises(NomadError) as caught:
        parse_prefix("abc")
    assert caught.value.message == (
        "alloc lookup failed: index error: Input (without hyphens) must be even length"
    )


# -- tokens -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "token"),
    [
        ({}, None),
        ({"X-Nomad-Token": " secret "}, "secret"),
        ({"X-Nomad-Token": "first", "Authorization": "Bearer second"}, "first"),
        ({"Authorization": "Bearer abc"}, "abc"),
        ({"Authorization": "bearer abc def"}, "abc"),
        ({"Authorization": "BEARER  abc"}, None),  # the word after the first space is empty
        ({"Authorization": "Basic abc"}, None),
        ({"Authorization": "Bearer"}, None),
        ({"X-Nomad-Token": "   ", "Authorization": "Bearer abc"}, None),
    ],
)
def test_extract_token(headers: dict[str, str], token: str | None) -> None:
    assert extract_token(headers) == token


@given(st.uuids())
def test_a_canonical_id_is_looked_up_as_the_full_decode_gives_it(value: uuid.UUID) -> None:
    """The canonical form is taken as it is (the common case, without the decode); the decode
    of the same text must agree, and so must the upper-case form, which goes through it."""
    text = str(value)
    digits = decode_uuid_text(text, full=True)
    decoded = f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"
    assert parse_alloc_id(text) == decoded == text
    assert parse_alloc_id(text.upper()) == text
