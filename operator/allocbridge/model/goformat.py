"""Go's `%q` and `%#U` formatting, because Nomad's error texts embed them.

For example `Unknown allocation "<id>"` (`%q`), or `encoding/hex: invalid byte: U+0067 'g'`
(`%#U`). Go decides printability with `unicode.IsPrint` (letters, marks, numbers, punctuation,
symbols and the ASCII space), which Python's `str.isprintable` matches.
"""

from __future__ import annotations

from typing import Final

_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}


def go_quote(text: str) -> str:
    """`strconv.Quote`: a double-quoted Go string literal."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")  # Go has no lone surrogates; it shows the replacement rune
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_unicode(code: int) -> str:
    """`%#U`: `U+0067 'g'`, without the quoted character when it is not printable."""
    text = f"U+{code:04X}"
    char = chr(code)
    return f"{text} '{char}'" if char.isprintable() else text
