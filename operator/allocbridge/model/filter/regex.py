"""Regular expressions: Go RE2 syntax, run by Python's `re`.

Regular expressions are Go RE2 syntax translated to Python's `re` (ASCII `\\d \\w \\s \\b`,
`$` at the very end, mid-pattern flags), but Unicode classes `\\pL` and the `U` flag are
refused.
"""

from __future__ import annotations

import re
from typing import Final

from allocbridge.model.filter.strconv import HEX_DIGITS, OCTAL_DIGITS


class _RegexError(Exception):
    pass


def _regex_error(code: str, expression: str) -> _RegexError:
    return _RegexError(f"error parsing regexp: {code}: `{expression}`")


_WORD_CLASS: Final = "0-9A-Za-z_"
_PERL_CLASSES: Final = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": f"[{_WORD_CLASS}]",
    "W": f"[^{_WORD_CLASS}]",
    "s": "[\\t\\n\\f\\r ]",
    "S": "[^\\t\\n\\f\\r ]",
}
_PERL_IN_CLASS: Final = {
    "d": "0-9",
    "w": _WORD_CLASS,
    "s": "\\t\\n\\f\\r ",
    "D": "\\D",  # approximation: Python's negated classes are Unicode-aware
    "W": "\\W",
    "S": "\\S",
}
_POSIX_CLASSES: Final = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": _WORD_CLASS,
    "xdigit": "0-9A-Fa-f",
}
_ASSERTIONS: Final = {
    "A": "(?:\\A)",
    "z": "(?:\\Z)",
    "b": f"(?:(?<=[{_WORD_CLASS}])(?![{_WORD_CLASS}])|(?<![{_WORD_CLASS}])(?=[{_WORD_CLASS}]))",
    "B": f"(?:(?<=[{_WORD_CLASS}])(?=[{_WORD_CLASS}])|(?<![{_WORD_CLASS}])(?![{_WORD_CLASS}]))",
}
_CHAR_ESCAPES: Final = {"a": 7, "f": 12, "t": 9, "n": 10, "r": 13, "v": 11}
_REPEAT: Final = re.compile(r"\{(\d+)(?:(,)(\d*))?\}")
_MAX_REPEAT: Final = 1000
_MAX_REGEX_NESTING: Final = 1000


class _RegexTranslator:
    """Go's regexp syntax to Python's, refusing what Go refuses and what Python cannot do."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.out: list[str] = []
        # One entry per open group: its flags ("ims") and the flag wrappers opened inside it.
        self.groups: list[tuple[set[str], list[str]]] = [(set(), [])]
        self.names: set[str] = set()

    def translate(self) -> str:
        pattern, size = self.pattern, len(self.pattern)
        index = 0
        operand = False  # something a repetition operator could apply to precedes
        last_repeat = ""
        while index < size:
            char = pattern[index]
            repeat = _REPEAT.match(pattern, index) if char == "{" else None
            if repeat is not None and not self._valid_repeat(repeat):
                repeat = None
            if char in "*+?" or repeat is not None:
                end = repeat.end() if repeat is not None else index + 1
                if end < size and pattern[end] == "?":
                    end += 1
                text = pattern[index:end]
                if last_repeat:
                    raise _regex_error("invalid nested repetition operator", last_repeat + text)
                if not operand:
                    raise _regex_error("missing argument to repetition operator", text)
                self.out.append(text)
                last_repeat = text
                index = end
                continue
            last_repeat = ""
            operand = True
            if char == "\\":
                index = self._escape(index)
            elif char == "[":
                index = self._class(index)
            elif char == "(":
                index = self._open(index)
                operand = False
            elif char == ")":
                if len(self.groups) == 1:
                    raise _regex_error("unexpected )", pattern)
                _, wrappers = self.groups.pop()
                self.out.append(")" * (len(wrappers) + 1))
                index += 1
            elif char == "|":
                wrappers = self.groups[-1][1]
                self.out.append(")" * len(wrappers) + "|" + "".join(wrappers))
                operand = False
                index += 1
            elif char == "^":
                self.out.append("(?:^)")
                index += 1
            elif char == "$":
                self.out.append("(?:$)" if "m" in self.groups[-1][0] else "(?:\\Z)")
                index += 1
            elif char == ".":
                self.out.append(".")
                index += 1
            else:
                self.out.append(re.escape(char))
                index += 1
        if len(self.groups) > 1:
            raise _regex_error("missing closing )", pattern)
        self.out.append(")" * len(self.groups[0][1]))
        return "".join(self.out)

    def _valid_repeat(self, repeat: re.Match[str]) -> bool:
        """Go reads `{n}`, `{n,}`, `{n,m}` (no leading zeros) as repeats; anything else is text."""
        low, comma, high = repeat.group(1), repeat.group(2), repeat.group(3)
        for number in (low, high):
            if number and len(number) > 1 and number[0] == "0":
                return False
        minimum = int(low)
        maximum = int(high) if high else (-1 if comma else minimum)
        if minimum > _MAX_REPEAT or maximum > _MAX_REPEAT or (0 <= maximum < minimum):
            raise _regex_error("invalid repeat count", repeat.group(0))
        return True

    def _read_escape(self, index: int, in_class: bool) -> tuple[str, str, int]:
        """Read `\\x` at index: ("char", char, end), ("class"|"assert"|"quote", text, end)."""
        pattern = self.pattern
        if index + 1 >= len(pattern):
            raise _regex_error("trailing backslash at end of expression", "")
        escape = pattern[index + 1]
        end = index + 2
        if escape in _PERL_CLASSES:
            return "class", escape, end
        if escape in "pP":
            close = pattern.find("}", end) + 1 if pattern.startswith("{", end) else end + 1
            name = pattern[index : close or len(pattern)]
            raise _regex_error("Unicode classes are not supported by allocbridge", name)
        if not in_class:
            if escape in _ASSERTIONS:
                return "assert", escape, end
            if escape == "Q":
                close = pattern.find("\\E", end)
                literal = pattern[end:] if close == -1 else pattern[end:close]
                return "quote", literal, len(pattern) if close == -1 else close + 2
            if escape == "C":
                return "assert", "C", end
        if escape in _CHAR_ESCAPES:
            return "char", chr(_CHAR_ESCAPES[escape]), end
        if "1" <= escape <= "7" and (end >= len(pattern) or pattern[end] not in OCTAL_DIGITS):
            raise _regex_error("invalid escape sequence", pattern[index:end])
        if escape in OCTAL_DIGITS:
            digits = escape
            while len(digits) < 3 and end < len(pattern) and pattern[end] in OCTAL_DIGITS:
                digits += pattern[end]
                end += 1
            return "char", chr(int(digits, 8)), end
        if escape == "x":
            if pattern.startswith("{", end):
                close = pattern.find("}", end)
                digits = pattern[end + 1 : close] if close != -1 else ""
                if not digits or not set(digits) <= HEX_DIGITS or int(digits, 16) > 0x10FFFF:
                    raise _regex_error("invalid escape sequence", pattern[index : close + 1])
                return "char", chr(int(digits, 16)), close + 1
            digits = pattern[end : end + 2]
            if len(digits) < 2 or not set(digits) <= HEX_DIGITS:
                raise _regex_error("invalid escape sequence", pattern[index : end + len(digits)])
            return "char", chr(int(digits, 16)), end + 2
        if escape.isascii() and not escape.isalnum():
            return "char", escape, end
        raise _regex_error("invalid escape sequence", pattern[index:end])

    def _escape(self, index: int) -> int:
        kind, text, end = self._read_escape(index, in_class=False)
        if kind == "class":
            self.out.append(_PERL_CLASSES[text])
        elif kind == "assert":
            self.out.append("(?s:.)" if text == "C" else _ASSERTIONS[text])
        elif kind == "quote":
            self.out.append(re.escape(text))
        else:
            self.out.append(re.escape(text))
        return end

    def _class(self, index: int) -> int:
        pattern = self.pattern
        start = index
        index += 1
        parts = ["["]
        if index < len(pattern) and pattern[index] == "^":
            parts.append("^")
            index += 1
        first = True
        while True:
            if index >= len(pattern):
                raise _regex_error("missing closing ]", pattern[start:])
            char = pattern[index]
            if char == "]" and not first:
                index += 1
                break
            first = False
            if pattern.startswith("[:", index):
                close = pattern.find(":]", index + 2)
                if close != -1:
                    name = pattern[index + 2 : close]
                    if name not in _POSIX_CLASSES:
                        raise _regex_error(
                            "invalid character class range", pattern[index : close + 2]
                        )
                    parts.append(_POSIX_CLASSES[name])
                    index = close + 2
                    continue
            low, is_class, index = self._class_char(index)
            if is_class:
                parts.append(_PERL_IN_CLASS[low])
                continue
            if index + 1 < len(pattern) and pattern[index] == "-" and pattern[index + 1] != "]":
                high, high_is_class, after = self._class_char(index + 1)
                if high_is_class or high < low:
                    raise _regex_error("invalid character class range", pattern[index - 1 : after])
                parts.append(f"{re.escape(low)}-{re.escape(high)}")
                index = after
            else:
                parts.append(re.escape(low))
        self.out.append("".join(parts) + "]")
        return index

    def _class_char(self, index: int) -> tuple[str, bool, int]:
        """One character of a class, or a Perl class name (`d`, `W`, ...) flagged True."""
        if self.pattern[index] != "\\":
            return self.pattern[index], False, index + 1
        kind, text, end = self._read_escape(index, in_class=True)
        return text, kind == "class", end

    def _open(self, index: int) -> int:
        pattern = self.pattern
        if len(self.groups) > _MAX_REGEX_NESTING:
            raise _regex_error("expression nests too deeply", pattern)
        flags = set(self.groups[-1][0])
        if not pattern.startswith("(?", index):
            self.groups.append((flags, []))
            self.out.append("(")
            return index + 1
        after = index + 2
        named = None
        if pattern.startswith("P<", after):
            named = after + 2
        elif pattern.startswith("<", after) and not pattern.startswith(("<=", "<!"), after):
            named = after + 1
        if named is not None:
            close = pattern.find(">", named)
            if close == -1:
                raise _regex_error("invalid named capture", pattern[index:])
            name = pattern[named:close]
            if not name or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
                raise _regex_error("invalid named capture", pattern[index : close + 1])
            if name in self.names:
                raise _regex_error("duplicate capture group name", name)
            self.names.add(name)
            self.groups.append((flags, []))
            self.out.append("(")  # names are never read back, and Go allows more than Python
            return close + 1
        on, off = "", ""
        negative = saw_flag = False
        position = after
        while position < len(pattern):
            char = pattern[position]
            position += 1
            if char in "imsU":
                if char == "U":
                    raise _regex_error(
                        "the U flag is not supported by allocbridge", pattern[index:position]
                    )
                if negative:
                    off += char
                else:
                    on += char
                saw_flag = True
            elif char == "-" and not negative:
                negative = True
                saw_flag = False
            elif char in ":)" and (saw_flag or not negative):
                flags |= set(on)
                flags -= set(off)
                wrapper = f"(?{on}-{off}:" if off else f"(?{on}:"
                if char == ":":
                    self.groups.append((flags, []))
                    self.out.append(wrapper)
                else:
                    current_flags, wrappers = self.groups[-1]
                    current_flags.clear()
                    current_flags.update(flags)
                    wrappers.append(wrapper)
                    self.out.append(wrapper)
                return position
            else:
                break
        raise _regex_error("invalid or unsupported Perl syntax", pattern[index:position])


def compile_regex(pattern: str) -> re.Pattern[str] | str:
    """The compiled expression, or Go's error text for it."""
    try:
        return re.compile(_translate_regex(pattern))
    except _RegexError as error:
        return str(error)
    except RecursionError:
        return f"error parsing regexp: expression nests too deeply: `{pattern}`"
    except (re.error, OverflowError, ValueError) as error:
        return f"error parsing regexp: {error}"


def _translate_regex(pattern: str) -> str:
    return _RegexTranslator(pattern).translate()
