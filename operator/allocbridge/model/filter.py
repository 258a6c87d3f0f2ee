"""Nomad's `filter` query parameter: the go-bexpr language, parsed once, evaluated per datum.

Why a faithful copy: tools send the same expression to a real Nomad and to us, so the same
expressions must parse, give the same answers and fail with the same messages. The facts come
from go-bexpr v0.1.16 (the version Nomad pins) and pointerstructure v1.2.1, as summarised in
`reference/nomad-allocations-api-behaviour.md` section 12; no code was copied.

Parsing. A hand-written PEG parser that follows go-bexpr's grammar rule for rule (ordered
choice, backtracking), and reports errors the way its pigeon-generated parser does: custom
errors such as `1:9 (8): rule "number": Invalid number literal`, otherwise
`no match found, expected: ...` at the farthest position any rule reached, with the sorted
expected tokens (lines and columns count characters from 1, the offset counts UTF-8 bytes from
0, several errors are joined with newlines). `or`/`and`/`not` chains are parsed in loops and the
`Or` rule is memoised, so long or nested inputs stay linear; nesting deeper than
`MAX_NESTING` groups is refused, where Go has no limit.

Values. Every literal keeps its raw text; it is converted with Go's `strconv` rules
(`ParseBool`, `ParseInt`/`ParseUint` base 0, `ParseFloat`) against the kind of the value it
meets. The conversions and the regular expressions are computed once, at compile time; their
errors are raised when evaluation reaches them, as go-bexpr does.

Types. go-bexpr walks Go values; we walk JSON-like dicts, which do not say what a real Nomad's
reflection sees. A `DatumShape` fills the gaps with dotted path patterns (`*` is any one map
key or list index, a final `**` covers a subtree):

- `maps`: dicts that are Go maps. Every other dict is a struct: an unknown key there is the
  error `couldn't find key: struct field with name "X"`, while a missing *last* key under a map
  gives the operator's "not present" answer (`==` false, `!=` true, ...). A missing key earlier
  in the path is an error in both, as in go-bexpr (`TaskStates.nope.State` fails).
- `slices`: a `null` there is a nil slice (empty); other nulls are nil pointers.
- `pointers`: primitives behind a Go pointer (`*bool`), which `is nil` may ask about.
- `unsigned`: `uint64` fields, whose literals go through `ParseUint`.

`NOMAD_ALLOCATION_SHAPE` describes Nomad's `structs.Allocation`; it is the default.

Known differences, on purpose: times (`time.Time` is a struct in Go, so `==` fails there) are
compared as the wire strings; a dict reached without a pointer (`DesiredTransition`) answers
`is nil` with false instead of an error; integers report the kind `int` (or `uint64` when the
shape says so) in messages, never `int64`; empty lists never raise conversion errors for `in`;
regular expressions are Go RE2 syntax translated to Python's `re` (ASCII `\\d \\w \\s \\b`,
`$` at the very end, mid-pattern flags), but Unicode classes `\\pL` and the `U` flag are
refused.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final, TypeAlias

from allocbridge.model.goformat import go_quote

__all__ = [
    "MAX_NESTING",
    "NOMAD_ALLOCATION_SHAPE",
    "DatumShape",
    "Filter",
    "FilterError",
    "FilterEvaluationError",
    "FilterSyntaxError",
    "compile_filter",
]

MAX_NESTING: Final = 100
"""Parenthesised groups and collection bodies may nest this deep (keeps Python's stack safe)."""


class FilterError(ValueError):
    """Base of both filter errors, so callers can catch either with one clause."""


class FilterSyntaxError(FilterError):
    """The expression does not parse; the message is go-bexpr's, e.g. `1:9 (8): ...`.

    `line`, `column` (both from 1) and `offset` (UTF-8 bytes from 0) locate the first error.
    """

    def __init__(self, message: str, line: int, column: int, offset: int) -> None:
        super().__init__(message)
        self.line = line
        self.column = column
        self.offset = offset


class FilterEvaluationError(FilterError):
    """The expression is valid but go-bexpr would fail on this datum; the message is its text."""


# --------------------------------------------------------------------------------------------
# Datum shape: what a JSON dict cannot say about the Go value it stands for.

_MAP: Final = 1
_SLICE: Final = 2
_POINTER: Final = 4
_UNSIGNED: Final = 8


@dataclass(frozen=True)
class DatumShape:
    """Path patterns naming the Go maps, nilable slices, pointers and unsigned ints of a datum."""

    maps: frozenset[str] = field(default_factory=frozenset)
    slices: frozenset[str] = field(default_factory=frozenset)
    pointers: frozenset[str] = field(default_factory=frozenset)
    unsigned: frozenset[str] = field(default_factory=frozenset)


_TG: Final = "Job.TaskGroups.*"
_TASK: Final = "Job.TaskGroups.*.Tasks.*"
_SERVICE_MAPS: Final = ("Meta", "CanaryMeta", "TaggedAddresses")
_SERVICE_SLICES: Final = ("Tags", "CanaryTags", "Checks")

NOMAD_ALLOCATION_SHAPE: Final = DatumShape(
    maps=frozenset(
        {
            "TaskStates",
            "TaskStates.*.Events.*.Details",
            "TaskResources",
            "SignedIdentities",
            "AllocatedResources.Tasks",
            "AllocatedResources.TaskLifecycles",
            "Metrics.NodesAvailable",
            "Metrics.ClassFiltered",
            "Metrics.ConstraintFiltered",
            "Metrics.ClassExhausted",
            "Metrics.DimensionExhausted",
            "Metrics.ResourcesExhausted",
            "Metrics.Scores",
            "Job.Meta",
            f"{_TG}.Meta",
            f"{_TG}.Volumes",
            f"{_TASK}.Env",
            f"{_TASK}.Meta",
            f"{_TASK}.Config.**",
            *(f"{_TG}.Services.*.{name}" for name in _SERVICE_MAPS),
            *(f"{_TASK}.Services.*.{name}" for name in _SERVICE_MAPS),
        }
    ),
    slices=frozenset(
        {
            "PreemptedAllocations",
            "AllocStates",
            "TaskStates.*.Events",
            "RescheduleTracker.Events",
            "Metrics.QuotaExhausted",
            "Metrics.ScoreMetaData",
            "AllocatedResources.Shared.Networks",
            "AllocatedResources.Shared.Ports",
            "AllocatedResources.Tasks.*.Networks",
            "AllocatedResources.Tasks.*.Devices",
            "Job.Datacenters",
            "Job.Constraints",
            "Job.Affinities",
            "Job.Spreads",
            "Job.TaskGroups",
            f"{_TG}.Tasks",
            f"{_TG}.Constraints",
            f"{_TG}.Affinities",
            f"{_TG}.Spreads",
            f"{_TG}.Networks",
            f"{_TG}.Services",
            f"{_TASK}.Services",
            f"{_TASK}.Constraints",
            f"{_TASK}.Affinities",
            f"{_TASK}.Templates",
            f"{_TASK}.Artifacts",
            f"{_TASK}.VolumeMounts",
            *(f"{_TG}.Services.*.{name}" for name in _SERVICE_SLICES),
            *(f"{_TASK}.Services.*.{name}" for name in _SERVICE_SLICES),
        }
    ),
    pointers=frozenset(
        {
            "DeploymentStatus.Healthy",
            "DesiredTransition.Migrate",
            "DesiredTransition.MigrateDisablePlacement",
            "DesiredTransition.Reschedule",
            "DesiredTransition.ForceReschedule",
            "DesiredTransition.NoShutdownDelay",
            f"{_TG}.StopAfterClientDisconnect",
            f"{_TG}.MaxClientDisconnect",
        }
    ),
    unsigned=frozenset(
        {
            "CreateIndex",
            "ModifyIndex",
            "AllocModifyIndex",
            "DeploymentStatus.ModifyIndex",
            "TaskStates.*.Restarts",
            "Job.Version",
            "Job.CreateIndex",
            "Job.ModifyIndex",
            "Job.JobModifyIndex",
        }
    ),
)


class _ShapeNode:
    __slots__ = ("children", "deep", "flags", "star")

    def __init__(self) -> None:
        self.children: dict[str, _ShapeNode] = {}
        self.star: _ShapeNode | None = None
        self.flags = 0
        self.deep = 0


class _ShapeIndex:
    """A trie of the shape's patterns; `hints(path)` gives the flags of every prefix."""

    def __init__(self, shape: DatumShape) -> None:
        self.root = _ShapeNode()
        for patterns, flag in (
            (shape.maps, _MAP),
            (shape.slices, _SLICE),
            (shape.pointers, _POINTER),
            (shape.unsigned, _UNSIGNED),
        ):
            for pattern in patterns:
                self._add(pattern, flag)

    def _add(self, pattern: str, flag: int) -> None:
        node = self.root
        segments = pattern.split(".") if pattern else []
        for index, segment in enumerate(segments):
            if segment == "**":
                if index != len(segments) - 1:
                    raise ValueError(f"'**' must end a shape pattern: {pattern!r}")
                node.deep |= flag
                return
            if segment == "*":
                if node.star is None:
                    node.star = _ShapeNode()
                node = node.star
            else:
                node = node.children.setdefault(segment, _ShapeNode())
        node.flags |= flag

    def hints(self, path: tuple[str, ...]) -> tuple[int, ...]:
        """Flags for the value at each prefix of `path`, the root first (len(path) + 1 items)."""
        active = [self.root]
        deep = self.root.deep
        out = [self.root.flags | deep]
        for segment in path:
            following: list[_ShapeNode] = []
            for node in active:
                child = node.children.get(segment)
                if child is not None:
                    following.append(child)
                if node.star is not None:
                    following.append(node.star)
            active = following
            flags = 0
            for node in active:
                deep |= node.deep
                flags |= node.flags
            out.append(flags | deep)
        return tuple(out)


@lru_cache(maxsize=32)
def _shape_index(shape: DatumShape) -> _ShapeIndex:
    return _ShapeIndex(shape)


# --------------------------------------------------------------------------------------------
# Go text helpers: quoting, unquoting and strconv number parsing.

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
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_OCTAL_DIGITS: Final = frozenset("01234567")


def _go_unquote(literal: str) -> str | None:
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
            if len(digits) < width or not set(digits) <= _HEX_DIGITS:
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
        elif escape in _OCTAL_DIGITS:
            digits = body[index - 1 : index + 2]
            if len(digits) < 3 or not set(digits) <= _OCTAL_DIGITS:
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


class _NumError(Exception):
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


def _parse_uint(text: str, function: str = "ParseUint") -> int:
    """`strconv.ParseUint(text, 0, 64)`."""
    if not text:
        raise _NumError(function, text, syntax=True)
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
            raise _NumError(function, original, syntax=True)
        if digit >= base:
            raise _NumError(function, original, syntax=True)
        if value >= cutoff:
            raise _NumError(function, original, syntax=False)
        value = value * base + digit
        if value > _UINT64_MAX:
            raise _NumError(function, original, syntax=False)
    if underscores and not _underscore_ok(original):
        raise _NumError(function, original, syntax=True)
    return value


def _parse_int(text: str) -> int:
    """`strconv.ParseInt(text, 0, 64)`."""
    if not text:
        raise _NumError("ParseInt", text, syntax=True)
    negative = text[0] == "-"
    digits = text[1:] if text[0] in "+-" else text
    try:
        magnitude = _parse_uint(digits)
    except _NumError as error:
        if error.syntax:
            raise _NumError("ParseInt", text, syntax=True) from None
        magnitude = _UINT64_MAX
    cutoff = 1 << 63
    if (not negative and magnitude >= cutoff) or (negative and magnitude > cutoff):
        raise _NumError("ParseInt", text, syntax=False)
    return -magnitude if negative else magnitude


def _parse_float(text: str) -> float:
    """`strconv.ParseFloat(text, 64)`: Go syntax, not Python's (no spaces, `+nan`, ...)."""
    if not text:
        raise _NumError("ParseFloat", text, syntax=True)
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
        raise _NumError("ParseFloat", text, syntax=True)
    if index < len(text) and text[index].lower() == ("p" if hexadecimal else "e"):
        index += 1
        if index < len(text) and text[index] in "+-":
            index += 1
        if index >= len(text) or not "0" <= text[index] <= "9":
            raise _NumError("ParseFloat", text, syntax=True)
        while index < len(text) and ("0" <= text[index] <= "9" or text[index] == "_"):
            underscores = underscores or text[index] == "_"
            index += 1
    elif hexadecimal:
        raise _NumError("ParseFloat", text, syntax=True)  # a hex mantissa needs a `p` exponent
    if index != len(text) or (underscores and not _underscore_ok(text)):
        raise _NumError("ParseFloat", text, syntax=True)
    plain = text.replace("_", "")
    try:
        value = float.fromhex(plain) if hexadecimal else float(plain)
    except OverflowError:
        raise _NumError("ParseFloat", text, syntax=False) from None
    if math.isinf(value):
        raise _NumError("ParseFloat", text, syntax=False)
    return value


_TRUE_WORDS: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE_WORDS: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _parse_bool(text: str) -> bool:
    """`strconv.ParseBool`."""
    if text in _TRUE_WORDS:
        return True
    if text in _FALSE_WORDS:
        return False
    raise _NumError("ParseBool", text, syntax=True)


# --------------------------------------------------------------------------------------------
# Syntax tree.


@dataclass(frozen=True, slots=True)
class _Selector:
    path: tuple[str, ...]
    pointer: bool  # written as a JSON pointer ("/a/b") rather than dotted

    @property
    def text(self) -> str:
        """go-bexpr's `Selector.String()`: also the raw value of a bare word used as a value."""
        return ("/" if self.pointer else ".").join(self.path)


@dataclass(frozen=True, slots=True)
class _Match:
    operator: str
    selector: _Selector
    raw: str | None


@dataclass(frozen=True, slots=True)
class _Not:
    operand: _Node


@dataclass(frozen=True, slots=True)
class _And:
    operands: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Or:
    operands: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Collection:
    quantifier: str  # "any" or "all"
    selector: _Selector
    default: str | None
    index: str | None
    value: str | None
    body: _Node


_Node: TypeAlias = _Match | _Not | _And | _Or | _Collection


# --------------------------------------------------------------------------------------------
# Parser: go-bexpr's PEG grammar, with pigeon's error bookkeeping.

_WS: Final = 0  # `_`: one or more of [ \t\r\n]
_WS_OPT: Final = 1  # `_?`
_Token: TypeAlias = int | str

_WHITESPACE: Final = frozenset(" \t\r\n")
_LETTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_DIGITS: Final = frozenset("0123456789")
_IDENTIFIER_REST: Final = _LETTERS | _DIGITS | {"_", "/"}
_POINTER_PUNCTUATION: Final = frozenset("-_.~:|")

# Expected-token texts as pigeon prints them (character classes as written in the grammar).
_WANT_WS: Final = "[ \\t\\r\\n]"
_WANT_LETTER: Final = "[a-zA-Z]"
_WANT_IDENTIFIER_REST: Final = "[a-zA-Z0-9_/]"
_WANT_DIGIT: Final = "[0-9]"
_WANT_NONZERO: Final = "[1-9]"
_WANT_POINTER_CHAR: Final = "[\\pL\\pN-_.~:|]"
_WANT_ANY: Final = "."

_OPS_SELECTOR_VALUE: Final[tuple[tuple[str, tuple[_Token, ...]], ...]] = (
    ("==", (_WS_OPT, "==", _WS_OPT)),
    ("!=", (_WS_OPT, "!=", _WS_OPT)),
    ("in", (_WS, "contains", _WS)),
    ("not in", (_WS, "not", _WS, "contains", _WS)),
    ("matches", (_WS, "matches", _WS)),
    ("not matches", (_WS, "not", _WS, "matches", _WS)),
)
_OPS_SELECTOR: Final[tuple[tuple[str, tuple[_Token, ...]], ...]] = (
    ("is empty", (_WS, "is", _WS, "empty")),
    ("is not empty", (_WS, "is", _WS, "not", _WS, "empty")),
    ("is nil", (_WS, "is", _WS, "nil")),
    ("is not nil", (_WS, "is", _WS, "not", _WS, "nil")),
)
_OPS_VALUE_SELECTOR: Final[tuple[tuple[str, tuple[_Token, ...]], ...]] = (
    ("in", (_WS, "in", _WS)),
    ("not in", (_WS, "not", _WS, "in", _WS)),
)


class _TooDeepError(Exception):
    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.position = position


def _is_pointer_char(char: str) -> bool:
    """`[\\pL\\pN-_.~:|]`: Unicode letters and numbers plus a little punctuation."""
    if char in _POINTER_PUNCTUATION:
        return True
    return char.isalpha() or char.isnumeric()


def _position(text: str, index: int) -> tuple[int, int, int]:
    """pigeon's (line, column, byte offset); a newline itself sits at column 0 of the next line."""
    head = text[:index]
    line = 1 + head.count("\n")
    column = index - head.rfind("\n")
    if index < len(text) and text[index] == "\n":
        line += 1
        column = 0
    return line, column, len(head.encode("utf-8", "surrogatepass"))


@lru_cache(maxsize=64)
def _quoted_want(literal: str) -> str:
    return go_quote(literal)


def _list_join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


class _Parser:
    """One parse of one expression. Methods return the end index, or None when they fail."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.size = len(text)
        self.invert = False  # inside an odd number of `!` predicates
        self.fail_at = 0
        self.expected: set[str] = set()
        self.errors: list[tuple[int, str, str]] = []
        self.or_memo: dict[int, tuple[_Node, int] | None] = {}
        self.depth = 0

    # ---- pigeon's bookkeeping -------------------------------------------------------------

    def _record(self, matched: bool, index: int, want: str) -> None:
        """Remember what was wanted at the farthest position (successes count under `!`)."""
        if matched != self.invert or index < self.fail_at:
            return
        if index > self.fail_at:
            self.fail_at = index
            self.expected.clear()
        self.expected.add("!" + want if self.invert else want)

    def _error(self, index: int, rule: str, message: str) -> None:
        self.errors.append((index, rule, message))

    def _literal(self, index: int, literal: str) -> int | None:
        want = _quoted_want(literal)
        if self.text.startswith(literal, index):
            self._record(True, index, want)
            return index + len(literal)
        self._record(False, index, want)
        return None

    def _char(self, index: int, allowed: frozenset[str], want: str) -> int | None:
        if index < self.size and self.text[index] in allowed:
            self._record(True, index, want)
            return index + 1
        self._record(False, index, want)
        return None

    def _any(self, index: int) -> int | None:
        if index < self.size:
            self._record(True, index, _WANT_ANY)
            return index + 1
        self._record(False, index, _WANT_ANY)
        return None

    def _ws(self, index: int) -> int | None:
        end = self._char(index, _WHITESPACE, _WANT_WS)
        if end is None:
            return None
        while (following := self._char(end, _WHITESPACE, _WANT_WS)) is not None:
            end = following
        return end

    def _ws_opt(self, index: int) -> int:
        end = self._ws(index)
        return index if end is None else end

    def _sequence(self, index: int, tokens: tuple[_Token, ...]) -> int | None:
        end: int | None = index
        for token in tokens:
            assert end is not None
            if token == _WS:
                end = self._ws(end)
            elif token == _WS_OPT:
                end = self._ws_opt(end)
            else:
                assert isinstance(token, str)
                end = self._literal(end, token)
            if end is None:
                return None
        return end

    def _not_literal(self, index: int, literal: str) -> bool:
        """`!"x"`: true when the literal is absent."""
        self.invert = not self.invert
        end = self._literal(index, literal)
        self.invert = not self.invert
        return end is None

    def _eof(self, index: int) -> bool:
        """`EOF <- !.`"""
        self.invert = not self.invert
        end = self._any(index)
        self.invert = not self.invert
        return end is None

    # ---- rules ----------------------------------------------------------------------------

    def parse(self) -> _Node:
        try:
            node = self._input()
        except _TooDeepError as too_deep:
            line, column, offset = _position(self.text, too_deep.position)
            raise FilterSyntaxError(
                f'{line}:{column} ({offset}): rule "grouping": '
                f"expression nests deeper than {MAX_NESTING} levels",
                line,
                column,
                offset,
            ) from None
        if self.errors:
            messages: list[str] = []
            first: tuple[int, int, int] | None = None
            for index, rule, message in self.errors:
                line, column, offset = _position(self.text, index)
                text = f'{line}:{column} ({offset}): rule "{rule}": {message}'
                if text not in messages:
                    messages.append(text)
                first = first or (line, column, offset)
            assert first is not None
            raise FilterSyntaxError("\n".join(messages), *first)
        if node is None:
            expected = set(self.expected)
            eof = "!." in expected
            expected.discard("!.")
            wanted = sorted(expected, key=lambda item: item.encode("utf-8", "surrogatepass"))
            if eof:
                wanted.append("EOF")
            line, column, offset = _position(self.text, self.fail_at)
            raise FilterSyntaxError(
                f"{line}:{column} ({offset}): no match found, expected: {_list_join(wanted)}",
                line,
                column,
                offset,
            )
        return node

    def _input(self) -> _Node | None:
        # Input <- _? "(" _? OrExpression _? ")" _? EOF / _? OrExpression _? EOF
        start = self._literal(self._ws_opt(0), "(")
        if start is not None:
            inner = self._or(self._ws_opt(start))
            if inner is not None:
                end = self._literal(self._ws_opt(inner[1]), ")")
                if end is not None and self._eof(self._ws_opt(end)):
                    return inner[0]
        whole = self._or(self._ws_opt(0))
        if whole is not None and self._eof(self._ws_opt(whole[1])):
            return whole[0]
        return None

    def _or(self, index: int) -> tuple[_Node, int] | None:
        # OrExpression <- AndExpression _ "or" _ OrExpression / AndExpression / Collection
        if index in self.or_memo:
            return self.or_memo[index]
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _TooDeepError(index)
        try:
            operands: list[_Node] = []
            end = index
            start = index
            while True:
                part = self._and(start)
                if part is None:
                    collection = self._collection(start)
                    if collection is not None:
                        operands.append(collection[0])
                        end = collection[1]
                    break
                operands.append(part[0])
                end = part[1]
                following = self._sequence(end, (_WS, "or", _WS))
                if following is None:
                    break
                start = following
        finally:
            self.depth -= 1
        result: tuple[_Node, int] | None = None
        if operands:
            node = operands[0] if len(operands) == 1 else _Or(tuple(operands))
            result = (node, end)
        self.or_memo[index] = result
        return result

    def _and(self, index: int) -> tuple[_Node, int] | None:
        # AndExpression <- NotExpression _ "and" _ AndExpression / NotExpression
        operands: list[_Node] = []
        end = index
        start = index
        while True:
            part = self._not(start)
            if part is None:
                break
            operands.append(part[0])
            end = part[1]
            following = self._sequence(end, (_WS, "and", _WS))
            if following is None:
                break
            start = following
        if not operands:
            return None
        return (operands[0] if len(operands) == 1 else _And(tuple(operands))), end

    def _not(self, index: int) -> tuple[_Node, int] | None:
        # NotExpression <- "not" _ NotExpression / ParenthesizedExpression
        starts = [index]
        while (following := self._sequence(starts[-1], ("not", _WS))) is not None:
            starts.append(following)
        for count in range(len(starts) - 1, -1, -1):
            inner = self._paren(starts[count])
            if inner is not None:  # `not not x` is `x`
                return (_Not(inner[0]) if count % 2 else inner[0]), inner[1]
        return None

    def _paren(self, index: int) -> tuple[_Node, int] | None:
        # ParenthesizedExpression "grouping" <- "(" _? Or _? ")" / Match / "(" _? Or _? !")"
        start = self._literal(index, "(")
        if start is not None:
            inner = self._or(self._ws_opt(start))
            if inner is not None:
                end = self._literal(self._ws_opt(inner[1]), ")")
                if end is not None:
                    return inner[0], end
        match = self._match(index)
        if match is not None:
            return match
        start = self._literal(index, "(")
        if start is not None:
            inner = self._or(self._ws_opt(start))
            if inner is not None:
                before = self._ws_opt(inner[1])
                if self._not_literal(before, ")"):
                    self._error(before, "grouping", "Unmatched parentheses")
        return None

    def _match(self, index: int) -> tuple[_Node, int] | None:
        # MatchExpression "match" <- SelectorOpValue / SelectorOp / ValueOpSelector
        selector = self._selector(index)
        if selector is not None:
            for operator, tokens in _OPS_SELECTOR_VALUE:
                after = self._sequence(selector[1], tokens)
                if after is not None:
                    value = self._value(after)
                    if value is not None:
                        return _Match(operator, selector[0], value[0]), value[1]
                    break
        selector = self._selector(index)
        if selector is not None:
            for operator, tokens in _OPS_SELECTOR:
                after = self._sequence(selector[1], tokens)
                if after is not None:
                    return _Match(operator, selector[0], None), after
        for attempt in (1, 2):
            value = self._value(index)
            if value is None:
                break
            for operator, tokens in _OPS_VALUE_SELECTOR:
                after = self._sequence(value[1], tokens)
                if after is None:
                    continue
                if attempt == 1:
                    target = self._selector(after)
                    if target is not None:
                        return _Match(operator, target[0], value[0]), target[1]
                else:
                    self.invert = not self.invert
                    target = self._selector(after)
                    self.invert = not self.invert
                    if target is None:
                        self._error(after, "match", "Invalid selector")
                break
        return None

    def _selector(self, index: int) -> tuple[_Selector, int] | None:
        # Selector "selector" <- Identifier SelectorOrIndex* / '"' JsonPointerSegment* '"'
        end = self._identifier(index)
        if end is not None:
            path = [self.text[index:end]]
            while (part := self._selector_or_index(end)) is not None:
                path.append(part[0])
                end = part[1]
            return _Selector(tuple(path), pointer=False), end
        start = self._literal(index, '"')
        if start is None:
            return None
        segments: list[str] = []
        while (segment := self._pointer_segment(start)) is not None:
            segments.append(segment[0])
            start = segment[1]
        end = self._literal(start, '"')
        if end is None:
            return None
        # pointerstructure.Parse("/" + joined): no segments still means one empty part.
        parts = tuple(part.replace("~1", "/").replace("~0", "~") for part in (segments or [""]))
        return _Selector(parts, pointer=True), end

    def _pointer_segment(self, index: int) -> tuple[str, int] | None:
        # JsonPointerSegment <- '/' [\pL\pN-_.~:|]+
        start = self._literal(index, "/")
        if start is None:
            return None
        end = start
        while True:
            if end < self.size and _is_pointer_char(self.text[end]):
                self._record(True, end, _WANT_POINTER_CHAR)
                end += 1
                continue
            self._record(False, end, _WANT_POINTER_CHAR)
            break
        if end == start:
            return None
        return self.text[start:end], end

    def _identifier(self, index: int) -> int | None:
        # Identifier <- [a-zA-Z] [a-zA-Z0-9_/]*
        end = self._char(index, _LETTERS, _WANT_LETTER)
        if end is None:
            return None
        while (following := self._char(end, _IDENTIFIER_REST, _WANT_IDENTIFIER_REST)) is not None:
            end = following
        return end

    def _selector_or_index(self, index: int) -> tuple[str, int] | None:
        # SelectorOrIndex <- "." Identifier / IndexExpression / "." [0-9]+
        start = self._literal(index, ".")
        if start is not None:
            end = self._identifier(start)
            if end is not None:
                return self.text[start:end], end
        indexed = self._index_expression(index)
        if indexed is not None:
            return indexed
        start = self._literal(index, ".")
        if start is not None:
            end = self._char(start, _DIGITS, _WANT_DIGIT)
            if end is not None:
                while (following := self._char(end, _DIGITS, _WANT_DIGIT)) is not None:
                    end = following
                return self.text[start:end], end
        return None

    def _index_expression(self, index: int) -> tuple[str, int] | None:
        # IndexExpression "index" <- "[" _? StringLiteral _? "]"
        #   / "[" _? !StringLiteral  (Invalid index)
        #   / "[" _? StringLiteral _? !"]"  (Unclosed index expression)
        start = self._literal(index, "[")
        if start is not None:
            key = self._string(self._ws_opt(start))
            if key is not None:
                end = self._literal(self._ws_opt(key[1]), "]")
                if end is not None:
                    return key[0], end
        start = self._literal(index, "[")
        if start is not None:
            start = self._ws_opt(start)
            self.invert = not self.invert
            key = self._string(start)
            self.invert = not self.invert
            if key is None:
                self._error(start, "index", "Invalid index")
        start = self._literal(index, "[")
        if start is not None:
            key = self._string(self._ws_opt(start))
            if key is not None:
                before = self._ws_opt(key[1])
                if self._not_literal(before, "]"):
                    self._error(before, "index", "Unclosed index expression")
        return None

    def _value(self, index: int) -> tuple[str, int] | None:
        # Value "value" <- Selector / NumberLiteral / StringLiteral
        selector = self._selector(index)
        if selector is not None:
            return selector[0].text, selector[1]
        number = self._number(index)
        if number is not None:
            return number
        return self._string(index)

    def _number(self, index: int) -> tuple[str, int] | None:
        # NumberLiteral "number" <- "-"? IntegerOrFloat &AfterNumbers
        #   / "-"? IntegerOrFloat !AfterNumbers  (Invalid number literal)
        end = self._integer_or_float(self._minus(index))
        if end is not None and self._after_numbers(end):
            return self.text[index:end], end
        end = self._integer_or_float(self._minus(index))
        if end is not None:
            self.invert = not self.invert
            after = self._after_numbers(end)
            self.invert = not self.invert
            if not after:
                self._error(end, "number", "Invalid number literal")
        return None

    def _minus(self, index: int) -> int:
        end = self._literal(index, "-")
        return index if end is None else end

    def _integer_or_float(self, index: int) -> int | None:
        # IntegerOrFloat <- ("0" / [1-9][0-9]*) ("." [0-9]+)?
        end = self._literal(index, "0")
        if end is None:
            end = self._char(index, _DIGITS - {"0"}, _WANT_NONZERO)
            if end is None:
                return None
            while (following := self._char(end, _DIGITS, _WANT_DIGIT)) is not None:
                end = following
        dot = self._literal(end, ".")
        if dot is not None:
            fraction = self._char(dot, _DIGITS, _WANT_DIGIT)
            if fraction is not None:
                while (following := self._char(fraction, _DIGITS, _WANT_DIGIT)) is not None:
                    fraction = following
                end = fraction
        return end

    def _after_numbers(self, index: int) -> bool:
        # AfterNumbers <- &(_ / EOF / ")")
        if self._ws(index) is not None or self._eof(index):
            return True
        return self._literal(index, ")") is not None

    def _string(self, index: int) -> tuple[str, int] | None:
        # StringLiteral "string" <- ('`' RawStringChar* '`' / '"' DoubleStringChar* '"')
        #   / ('`' RawStringChar* / '"' DoubleStringChar*) EOF  (Unterminated string literal)
        for quote in ("`", '"'):
            end = self._quoted(index, quote)
            if end is not None:
                closed = self._literal(end, quote)
                if closed is not None:
                    value = _go_unquote(self.text[index:closed])
                    if value is None:
                        self._error(index, "string", "invalid syntax")
                        value = ""
                    return value, closed
        for quote in ("`", '"'):
            end = self._quoted(index, quote)
            if end is not None:
                if self._eof(end):
                    self._error(end, "string", "Unterminated string literal")
                break
        return None

    def _quoted(self, index: int, quote: str) -> int | None:
        """The opening quote and the characters up to (not including) the next one."""
        end = self._literal(index, quote)
        if end is None:
            return None
        while True:
            if not self._not_literal(end, quote):
                return end
            following = self._any(end)
            if following is None:
                return end
            end = following

    def _collection(self, index: int) -> tuple[_Node, int] | None:
        # CollectionExpression "collection" <- ("any" / "all") _ Selector _ "as" _
        #   CollectionNameBinding _? "{" _? OrExpression _? "}"
        quantifier = "any"
        end = self._literal(index, "any")
        if end is None:
            quantifier = "all"
            end = self._literal(index, "all")
        if end is None:
            return None
        end = self._ws(end)
        if end is None:
            return None
        selector = self._selector(end)
        if selector is None:
            return None
        end = self._sequence(selector[1], (_WS, "as", _WS))
        if end is None:
            return None
        binding = self._binding(end)
        if binding is None:
            return None
        end = self._sequence(binding[3], (_WS_OPT, "{", _WS_OPT))
        if end is None:
            return None
        body = self._or(end)
        if body is None:
            return None
        end = self._sequence(body[1], (_WS_OPT, "}"))
        if end is None:
            return None
        default, index_name, value_name, _ = binding
        node = _Collection(quantifier, selector[0], default, index_name, value_name, body[0])
        return node, end

    def _binding(self, index: int) -> tuple[str | None, str | None, str | None, int] | None:
        # CollectionNameBinding "collection-identifiers" <- Identifier _? "," _? Identifier
        #   / Identifier _? "," _? "_" / "_" _? "," _? Identifier / Identifier
        first = self._identifier(index)
        if first is not None:
            after = self._sequence(first, (_WS_OPT, ",", _WS_OPT))
            if after is not None:
                second = self._identifier(after)
                if second is not None:
                    return None, self.text[index:first], self.text[after:second], second
        if first is not None:
            after = self._sequence(first, (_WS_OPT, ",", _WS_OPT, "_"))
            if after is not None:
                return None, self.text[index:first], None, after
        after = self._sequence(index, ("_", _WS_OPT, ",", _WS_OPT))
        if after is not None:
            second = self._identifier(after)
            if second is not None:
                return None, None, self.text[after:second], second
        if first is not None:
            return self.text[index:first], None, None, first
        return None


# --------------------------------------------------------------------------------------------
# Regular expressions: Go RE2 syntax, run by Python's `re`.


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
        if "1" <= escape <= "7" and (end >= len(pattern) or pattern[end] not in _OCTAL_DIGITS):
            raise _regex_error("invalid escape sequence", pattern[index:end])
        if escape in _OCTAL_DIGITS:
            digits = escape
            while len(digits) < 3 and end < len(pattern) and pattern[end] in _OCTAL_DIGITS:
                digits += pattern[end]
                end += 1
            return "char", chr(int(digits, 8)), end
        if escape == "x":
            if pattern.startswith("{", end):
                close = pattern.find("}", end)
                digits = pattern[end + 1 : close] if close != -1 else ""
                if not digits or not set(digits) <= _HEX_DIGITS or int(digits, 16) > 0x10FFFF:
                    raise _regex_error("invalid escape sequence", pattern[index : close + 1])
                return "char", chr(int(digits, 16)), close + 1
            digits = pattern[end : end + 2]
            if len(digits) < 2 or not set(digits) <= _HEX_DIGITS:
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


def _compile_regex(pattern: str) -> re.Pattern[str] | str:
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


# --------------------------------------------------------------------------------------------
# Evaluation: the syntax tree becomes nested closures with everything static precomputed.


class _Missing:
    """A map key that is absent at the end of a path: the operator's "not present" answer."""


_MISSING: Final = _Missing()


class _Frame:
    """A collection binding: a concrete key or index (`path` None) or an alias for a path."""

    __slots__ = ("name", "parent", "path", "value")

    def __init__(
        self, name: str, path: tuple[str, ...] | None, value: object, parent: _Frame | None
    ) -> None:
        self.name = name
        self.path = path
        self.value = value
        self.parent = parent


_Test: TypeAlias = Callable[[Any, _Frame | None], bool]
_Getter: TypeAlias = Callable[[Any, _Frame | None], tuple[Any, int]]


def _pointer_text(path: tuple[str, ...]) -> str:
    """pointerstructure's `Pointer.String()`, the path shown in resolution errors."""
    if not path:
        return "/"
    return "/" + "/".join(part.replace("~", "~0").replace("/", "~1") for part in path)


def _kind(value: object, hint: int) -> str:
    """The Go `reflect.Kind` name go-bexpr would see for this JSON value."""
    if value is None:
        if hint & _MAP:
            return "map"
        if hint & _SLICE:
            return "slice"
        return "invalid"  # a nil pointer, dereferenced
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "uint64" if hint & _UNSIGNED else "int"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "map" if hint & _MAP else "struct"
    if isinstance(value, list | tuple):
        return "slice"
    return "struct"


_PRIMITIVE_KINDS: Final = frozenset({"bool", "int", "uint64", "float64", "string"})
_GO_TYPE_NAMES: Final = {
    "map": "map[string]interface {}",
    "slice": "[]interface {}",
    "invalid": "<nil>",
}


def _resolution_error(pointer: str, part_index: int, reason: str) -> FilterEvaluationError:
    return FilterEvaluationError(
        f"error finding value in datum: {pointer} at part {part_index}: {reason}"
    )


def _slice_index(pointer: str, part_index: int, part: str, length: int) -> int:
    """A path segment as a list index, checked like pointerstructure does."""
    try:
        index = _parse_int(part or "0")
    except _NumError:
        raise _resolution_error(
            pointer, part_index, f"couldn't convert value {go_quote(part)} to type int"
        ) from None
    if not 0 <= index < length:
        raise _resolution_error(
            pointer, part_index, f"index {index} is out of range (length = {length})"
        )
    return index


def _walk(root: Any, path: tuple[str, ...], hints: tuple[int, ...], pointer: str) -> Any:
    """Follow `path` from the root like pointerstructure.Get plus go-bexpr's not-present rule."""
    current = root
    last = len(path) - 1
    for part_index, part in enumerate(path):
        hint = hints[part_index]
        if type(current) is dict or isinstance(current, Mapping):
            found = current.get(part, _MISSING)
            if found is not _MISSING:
                current = found
                continue
            if not hint & _MAP:
                raise _resolution_error(
                    pointer,
                    part_index,
                    f"couldn't find key: struct field with name {go_quote(part)}",
                )
        elif isinstance(current, list | tuple):
            current = current[_slice_index(pointer, part_index, part, len(current))]
            continue
        elif current is None and hint & _SLICE:
            _slice_index(pointer, part_index, part, 0)
        elif current is not None or not hint & _MAP:
            kind = _kind(current, hint)
            raise FilterEvaluationError(
                f"error finding value in datum: {pointer}: at part {part_index}, "
                f"invalid value kind: {kind}"
            )
        # A key missing from a map (possibly a nil one): "not present" only at the leaf.
        if part_index == last and last > 0:
            return _MISSING
        raise _resolution_error(pointer, part_index, f"couldn't find key {go_quote(part)}")
    return current


class _Literal:
    """A raw literal with its Go conversions done once; failures are kept to raise later."""

    __slots__ = ("by_kind", "raw")

    def __init__(self, raw: str) -> None:
        self.raw = raw
        self.by_kind: dict[str, object] = {"string": raw}
        for kind, parse in (
            ("bool", _parse_bool),
            ("int", _parse_int),
            ("uint64", _parse_uint),
            ("float64", _parse_float),
        ):
            try:
                self.by_kind[kind] = parse(raw)
            except _NumError as error:
                self.by_kind[kind] = error

    def converted(self, kind: str) -> object:
        """The literal as this kind; a `_NumError` when Go's strconv would refuse it."""
        return self.by_kind.get(kind, self.raw)


def _conversion_error(error: _NumError) -> FilterEvaluationError:
    return FilterEvaluationError(f"error getting match value in expression: {error.message}")


def _equal(literal: _Literal, value: Any, hint: int) -> bool:
    if type(value) is str:
        return value == literal.raw
    kind = _kind(value, hint)
    if kind not in _PRIMITIVE_KINDS:
        raise FilterEvaluationError(
            "unable to find suitable primitive comparison function for matching"
        )
    converted = literal.converted(kind)
    if isinstance(converted, _NumError):
        raise _conversion_error(converted)
    return bool(value == converted)


def _list_contains(literal: _Literal, items: list[Any] | tuple[Any, ...]) -> bool:
    """`in` on a list: a typed slice if the elements share a kind, else an `[]interface{}`."""
    present = [item for item in items if item is not None]
    kinds = {_kind(item, 0) for item in present}
    if len(kinds) == 1:
        (kind,) = kinds
        converted = literal.converted(kind)
        if isinstance(converted, _NumError):
            raise _conversion_error(converted)
        if kind not in _PRIMITIVE_KINDS:
            raise FilterEvaluationError(
                'unable to find suitable primitive comparison function for "in" comparison'
            )
        return any(item == converted for item in present)
    for item in present:
        kind = _kind(item, 0)
        converted = literal.converted(kind)
        if isinstance(converted, _NumError):
            if converted.syntax:
                continue
            raise FilterEvaluationError("error getting interface slice match value in expression")
        if kind not in _PRIMITIVE_KINDS:
            raise FilterEvaluationError(
                'unable to find suitable primitive comparison function for "in" comparison '
                f"in interface slice: {kind}"
            )
        if item == converted:
            return True
    return False


def _contains(literal: _Literal, value: Any, hint: int, selector: str) -> bool:
    kind = _kind(value, hint)
    if kind == "string":
        return literal.raw in value
    if kind in _PRIMITIVE_KINDS:  # converted first, so a bad literal is reported first
        converted = literal.converted(kind)
        if isinstance(converted, _NumError):
            raise _conversion_error(converted)
    elif kind == "map":
        return value is not None and literal.raw in value
    elif kind == "slice":
        return value is not None and _list_contains(literal, value)
    raise FilterEvaluationError(
        f"cannot perform in/contains operations on type {kind} for selector: {selector}"
    )


def _is_empty(value: Any, hint: int, selector: str) -> bool:
    if value is None:
        return True  # nil maps, slices and pointers all count as empty
    kind = _kind(value, hint)
    if kind in ("string", "map", "slice"):
        return len(value) == 0
    raise FilterEvaluationError(
        f"cannot perform is-empty operations on type {kind} for selector: {selector}"
    )


def _is_nil(value: Any, hint: int, selector: str) -> bool:
    if value is None:
        return True
    kind = _kind(value, hint)
    if kind in ("map", "slice", "struct") or hint & _POINTER:
        return False
    raise FilterEvaluationError(
        f"cannot perform is-nil operations on type {kind} for selector: {selector}"
    )


def _regex_matches(pattern: re.Pattern[str] | str, raw: str, value: Any, hint: int) -> bool:
    if not isinstance(value, str):
        kind = _kind(value, hint)
        type_name = _GO_TYPE_NAMES.get(kind, kind)
        raise FilterEvaluationError(f"value of type {type_name} is not convertible to []byte")
    if isinstance(pattern, str):
        raise FilterEvaluationError(
            f"failed to compile regular expression {go_quote(raw)}: {pattern}"
        )
    return pattern.search(value) is not None


# What each operator answers when its selector names a key missing from a map.
_NOT_PRESENT: Final = {
    "==": False,
    "!=": True,
    "in": False,
    "not in": True,
    "is empty": True,
    "is not empty": False,
    "is nil": True,
    "is not nil": False,
    "matches": False,
    "not matches": True,
}


def _substitute(frame: _Frame | None, path: tuple[str, ...]) -> tuple[bool, Any]:
    """Replace a leading binding name, innermost first: (True, value) or (False, full path)."""
    while frame is not None:
        if path[0] == frame.name:
            if frame.path is None:
                if len(path) > 1:
                    type_name = "int" if isinstance(frame.value, int) else "string"
                    raise FilterEvaluationError(
                        f"{_pointer_text(path[:1])} references a {type_name} "
                        f"so {_pointer_text(path)} is invalid"
                    )
                return True, frame.value
            path = frame.path + path[1:]
        frame = frame.parent
    return False, path


class _Compiler:
    def __init__(self, shape: _ShapeIndex) -> None:
        self.shape = shape

    def compile(self, node: _Node, scope: frozenset[str]) -> _Test:
        if isinstance(node, _Match):
            return self._match(node, scope)
        if isinstance(node, _Not):
            operand = self.compile(node.operand, scope)
            return lambda root, frame: not operand(root, frame)
        if isinstance(node, _And):
            operands = tuple(self.compile(item, scope) for item in node.operands)

            def all_of(root: Any, frame: _Frame | None) -> bool:
                for operand in operands:  # noqa: SIM110 - a generator costs more per datum
                    if not operand(root, frame):
                        return False
                return True

            return all_of
        if isinstance(node, _Or):
            alternatives = tuple(self.compile(item, scope) for item in node.operands)

            def any_of(root: Any, frame: _Frame | None) -> bool:
                for alternative in alternatives:  # noqa: SIM110 - as above
                    if alternative(root, frame):
                        return True
                return False

            return any_of
        return self._collection(node, scope)

    def _getter(self, selector: _Selector, scope: frozenset[str]) -> _Getter:
        """How to fetch the selector's value, with the shape hint of the place it came from."""
        path = selector.path
        shape = self.shape
        if path[0] not in scope:
            fetch, leaf = self._static(path)

            def static(root: Any, frame: _Frame | None) -> tuple[Any, int]:
                return fetch(root), leaf

            return static

        def bound(root: Any, frame: _Frame | None) -> tuple[Any, int]:
            is_value, found = _substitute(frame, path)
            if is_value:
                return found, 0
            hints = shape.hints(found)
            return _walk(root, found, hints, _pointer_text(found)), hints[-1]

        return bound

    def _static(self, path: tuple[str, ...]) -> tuple[Callable[[Any], Any], int]:
        """A fetcher for a path that names no binding, and the hint of its leaf."""
        hints = self.shape.hints(path)
        pointer = _pointer_text(path)
        if len(path) == 1 and not hints[0] & _MAP:
            key = path[0]

            def top_level(root: Any) -> Any:
                if type(root) is dict:
                    found = root.get(key, _MISSING)
                    if found is not _MISSING:
                        return found
                return _walk(root, path, hints, pointer)

            return top_level, hints[-1]

        def nested(root: Any) -> Any:
            # Plain dicts with every key present resolve the same whatever the shape says;
            # anything else (a missing key, a list, a null) takes the exact walk.
            current = root
            for part in path:
                if type(current) is not dict:
                    return _walk(root, path, hints, pointer)
                current = current.get(part, _MISSING)
                if current is _MISSING:
                    return _walk(root, path, hints, pointer)
            return current

        return nested, hints[-1]

    def _match(self, node: _Match, scope: frozenset[str]) -> _Test:
        operator = node.operator
        selector = go_quote(node.selector.text)
        absent = _NOT_PRESENT[operator]
        negate = operator.startswith("not ") or operator in ("!=", "is not empty", "is not nil")
        literal = _Literal(node.raw if node.raw is not None else "")
        check: Callable[[Any, int], bool]
        if operator in ("==", "!="):

            def check(value: Any, hint: int) -> bool:
                return _equal(literal, value, hint)

        elif operator in ("in", "not in"):

            def check(value: Any, hint: int) -> bool:
                return _contains(literal, value, hint, selector)

        elif operator in ("is empty", "is not empty"):

            def check(value: Any, hint: int) -> bool:
                return _is_empty(value, hint, selector)

        elif operator in ("is nil", "is not nil"):

            def check(value: Any, hint: int) -> bool:
                return _is_nil(value, hint, selector)

        else:
            pattern = _compile_regex(literal.raw)

            def check(value: Any, hint: int) -> bool:
                return _regex_matches(pattern, literal.raw, value, hint)

        if node.selector.path[0] not in scope:
            fetch, leaf = self._static(node.selector.path)
            raw = literal.raw
            if operator in ("==", "!="):

                def static_equal(root: Any, frame: _Frame | None) -> bool:
                    value = fetch(root)
                    if type(value) is str:  # the common case, without a call
                        return (value == raw) != negate
                    if value is _MISSING:
                        return absent
                    return _equal(literal, value, leaf) != negate

                return static_equal

            def static_test(root: Any, frame: _Frame | None) -> bool:
                value = fetch(root)
                if value is _MISSING:
                    return absent
                return check(value, leaf) != negate

            return static_test

        get = self._getter(node.selector, scope)

        def test(root: Any, frame: _Frame | None) -> bool:
            value, hint = get(root, frame)
            if value is _MISSING:
                return absent
            return check(value, hint) != negate

        return test

    def _collection(self, node: _Collection, scope: frozenset[str]) -> _Test:
        get = self._getter(node.selector, scope)
        names = {name for name in (node.default, node.index, node.value) if name is not None}
        body = self.compile(node.body, scope | names)
        want_all = node.quantifier == "all"
        base = node.selector.path
        default, index_name, value_name = node.default, node.index, node.value
        duplicate = index_name is not None and index_name == value_name
        selector_text = node.selector.text

        def bindings(key: str | int, parent: _Frame | None) -> _Frame | None:
            alias = (*base, str(key))
            frame = parent
            if isinstance(key, str):  # a map: the default name is the key
                if default is not None:
                    frame = _Frame(default, None, key, frame)
                if index_name is not None:
                    frame = _Frame(index_name, None, key, frame)
            else:  # a list: the default name is the element
                if index_name is not None:
                    frame = _Frame(index_name, None, key, frame)
                if default is not None:
                    frame = _Frame(default, alias, None, frame)
            if value_name is not None:
                frame = _Frame(value_name, alias, None, frame)
            return frame

        def test(root: Any, frame: _Frame | None) -> bool:
            value, hint = get(root, frame)
            if value is _MISSING:
                return want_all
            keys: list[str] | range
            if isinstance(value, list | tuple):
                keys = range(len(value))
            elif isinstance(value, Mapping) and hint & _MAP:
                keys = list(value)
            elif value is None and hint & (_MAP | _SLICE):
                return want_all
            else:
                raise FilterEvaluationError(f"{selector_text} is not a list or a map")
            for key in keys:
                if duplicate:
                    raise FilterEvaluationError(
                        f"{go_quote(index_name or '')} cannot be used as a placeholder "
                        "for both the index and the value"
                    )
                if body(root, bindings(key, frame)) != want_all:
                    return not want_all
            return want_all

        return test


# --------------------------------------------------------------------------------------------
# Public API.


class Filter:
    """A compiled expression; `matches` is cheap enough to run on every listed allocation."""

    __slots__ = ("_test", "expression")

    def __init__(self, expression: str, test: _Test) -> None:
        self.expression = expression
        self._test = test

    def matches(self, datum: Mapping[str, Any]) -> bool:
        """Whether the datum passes; raises FilterEvaluationError where go-bexpr would fail."""
        return self._test(datum, None)

    def __repr__(self) -> str:
        return f"Filter({self.expression!r})"


def compile_filter(expression: str, *, shape: DatumShape = NOMAD_ALLOCATION_SHAPE) -> Filter:
    """Parse a go-bexpr expression once; raises FilterSyntaxError with go-bexpr's message.

    An empty expression is a syntax error here as in go-bexpr: callers that treat an empty
    `filter` parameter as "no filter" (as Nomad does) must check before compiling.
    """
    tree = _Parser(expression).parse()
    return Filter(expression, _Compiler(_shape_index(shape)).compile(tree, frozenset()))
