"""Go text helpers: quoting, unquoting and strconv number parsing.

Go's `strconv.Unquote` for string literals, and `ParseBool`, `ParseInt`/`ParseUint` (base 0)
and `ParseFloat` with the texts of their `strconv.NumError`s.
"""

from __future__ import annotations

import math
from typing import Final

from allocbridge.model.goformat import go_quote

_UNQUOTE_SIMPLE: Final = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
}
HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
OCTAL_DIGITS: Final = frozenset("01234567")


def go_unquote(literal: str) -> str | None:
    """Go's `strconv.Unquote` of a complete string literal; None means `invalid syntax`."""
    quote, body = literal[0], literal[1:-1]
    if quote == "`":
        return body.replace("\r", "")
    if "\n" in body:
        return None
    if "\\" not in body:
        return body
    pieces: list[str] = []
    pending = bytearray()  # `\x` and octal escapes are bytes; consecutive ones form UTF-8

    def flush() -> None:
        if pending:
            pieces.append(pending.decode("utf-8", "surrogateescape"))
            pending.clear()

    index, size = 0, len(body)
    while index < size:
        char = body[index]
        if char != "\\":
            flush()
            pieces.append(char)
            index += 1
            continue
        if index + 1 >= size:
            return None
        escape = body[index + 1]
        index += 2
        if escape in _UNQUOTE_SIMPLE:
            flush()
            pieces.append(_UNQUOTE_SIMPLE[escape])
        elif escape in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[escape]
            digits = body[index : index + width]
            if len(digits) < width or not set(digits) <= HEX_DIGITS:
                return None
            index += width
            value = int(digits, 16)
            if escape == "x":
                pending.append(value)
                continue
            if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
                return None
            flush()
            pieces.append(chr(value))
        elif escape in OCTAL_DIGITS:
            digits = body[index - 1 : index + 2]
            if len(digits) < 3 or not set(digits) <= OCTAL_DIGITS:
                return None
            value = int(digits, 8)
            if value > 255:
                return None
            index += 2
            pending.append(value)
        else:
            return None
    flush()
    return "".join(pieces)


class NumError(Exception):
    """A `strconv.NumError`: `message` is its Go text, `syntax` tells ErrSyntax from ErrRange."""

    def __init__(self, function: str, text: str, syntax: bool) -> None:
        reason = "invalid syntax" if syntax else "value out of range"
        self.message = f"strconv.{function}: parsing {go_quote(text)}: {reason}"
        self.syntax = syntax
        super().__init__(self.message)


_UINT64_MAX: Final = (1 << 64) - 1


def _underscore_ok(text: str) -> bool:
    """Go's rule: `_` only between digits, or between a base prefix and a digit."""
    saw = "^"
    index = 0
    if text[:1] in ("+", "-"):
        text = text[1:]
    hexadecimal = False
    if len(text) >= 2 and text[0] == "0" and text[1].lower() in ("b", "o", "x"):
        index = 2
        saw = "0"
        hexadecimal = text[1].lower() == "x"
    while index < len(text):
        char = text[index]
        index += 1
        if "0" <= char <= "9" or (hexadecimal and char.lower() in "abcdef" and char.isascii()):
            saw = "0"
            continue
        if char == "_":
            if saw != "0":
                return False
            saw = "_"
            continue
        if saw == "_":
            return False
        saw = "!"
    return saw != "_"


def parse_uint(text: str, function: str = "ParseUint") -> int:
    """`strconv.ParseUint(text, 0, 64)`."""
    if not text:
        raise NumError(function, text, syntax=True)
    original = text
    base = 10
    if text[0] == "0":
        prefix = text[1:2].lower()
        if len(text) >= 3 and prefix in ("b", "o", "x"):
            base = {"b": 2, "o": 8, "x": 16}[prefix]
            text = text[2:]
        else:
            base = 8
            text = text[1:]
    cutoff = _UINT64_MAX // base + 1
    value = 0
    underscores = False
    for char in text:
        if char == "_":
            underscores = True
            continue
        if "0" <= char <= "9":
            digit = ord(char) - 48
        elif char.isascii() and "a" <= char.lower() <= "z":
            digit = ord(char.lower()) - 87
        else:
            raise NumError(function, original, syntax=True)
        if digit >= base:
            raise NumError(function, original, syntax=True)
        if value >= cutoff:
            raise NumError(function, original, syntax=False)
        value = value * base + digit
        if value > _UINT64_MAX:
            raise NumError(function, original, syntax=False)
    if underscores and not _underscore_ok(original):
        raise NumError(function, original, syntax=True)
    return value


def parse_int(text: str) -> int:
    """`strconv.ParseInt(text, 0, 64)`."""
    if not text:
        raise NumError("ParseInt", text, syntax=True)
    negative = text[0] == "-"
    digits = text[1:] if text[0] in "+-" else text
    try:
        magnitude = parse_uint(digits)
    except NumError as error:
        if error.syntax:
            raise NumError("ParseInt", text, syntax=True) from None
        magnitude = _UINT64_MAX
    cutoff = 1 << 63
    if (not negative and magnitude >= cutoff) or (negative and magnitude > cutoff):
        raise NumError("ParseInt", text, syntax=False)
    return -magnitude if negative else magnitude


def parse_float(text: str) -> float:
    """`strconv.ParseFloat(text, 64)`: Go syntax, not Python's (no spaces, `+nan`, ...)."""
    if not text:
        raise NumError("ParseFloat", text, syntax=True)
    unsigned = text[1:] if text[0] in "+-" else text
    if unsigned.lower() in ("inf", "infinity"):
        return -math.inf if text[0] == "-" else math.inf
    if text.lower() == "nan":
        return math.nan
    index = len(text) - len(unsigned)
    hexadecimal = False
    if len(unsigned) > 2 and unsigned[0] == "0" and unsigned[1] in "xX":
        hexadecimal = True
        index += 2
    saw_dot = saw_digits = underscores = False
    while index < len(text):
        char = text[index]
        if char == "_":
            underscores = True
        elif char == ".":
            if saw_dot:
                break
            saw_dot = True
        elif "0" <= char <= "9" or (hexadecimal and char in "abcdefABCDEF"):
            saw_digits = True
        else:
            break
        index += 1
    if not saw_digits:
        raise NumError("ParseFloat", text, syntax=True)
    if index < len(text) and text[index].lower() == ("p" if hexadecimal else "e"):
        index += 1
        if index < len(text) and text[index] in "+-":
            index += 1
        if index >= len(text) or not "0" <= text[index] <= "9":
            raise NumError("ParseFloat", text, syntax=True)
        while index < len(text) and ("0" <= text[index] <= "9" or text[index] == "_"):
            underscores = underscores or text[index] == "_"
            index += 1
    elif hexadecimal:
        raise NumError("ParseFloat", text, syntax=True)  # a hex mantissa needs a `p` exponent
    if index != len(text) or (underscores and not _underscore_ok(text)):
        raise NumError("ParseFloat", text, syntax=True)
    plain = text.replace("_", "")
    try:
        value = float.fromhex(plain) if hexadecimal else float(plain)
    except OverflowError:
        raise NumError("ParseFloat", text, syntax=False) from None
    if math.isinf(value):
        raise NumError("ParseFloat", text, syntax=False)
    return value


_TRUE_WORDS: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE_WORDS: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(text: str) -> bool:
    """`strconv.ParseBool`."""
    if text in _TRUE_WORDS:
        return True
    if text in _FALSE_WORDS:
        return False
    raise NumError("ParseBool", text, syntax=True)
