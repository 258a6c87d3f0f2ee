"""Parser: go-bexpr's PEG grammar, with pigeon's error bookkeeping.

A hand-written PEG parser that follows go-bexpr's grammar rule for rule (ordered choice,
backtracking), and reports errors the way its pigeon-generated parser does: custom errors such
as `1:9 (8): rule "number": Invalid number literal`, otherwise `no match found, expected: ...`
at the farthest position any rule reached, with the sorted expected tokens (lines and columns
count characters from 1, the offset counts UTF-8 bytes from 0, several errors are joined with
newlines). `or`/`and`/`not` chains are parsed in loops and the `Or` rule is memoised, so long
or nested inputs stay linear; nesting deeper than `MAX_NESTING` groups is refused, where Go has
no limit.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final, TypeAlias

from allocbridge.model.filter.errors import MAX_NESTING, FilterSyntaxError
from allocbridge.model.filter.strconv import go_unquote
from allocbridge.model.filter.syntax import And, Collection, Match, Node, Not, Or, Selector
from allocbridge.model.goformat import go_quote

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


class Parser:
    """One parse of one expression. Methods return the end index, or None when they fail."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.size = len(text)
        self.invert = False  # inside an odd number of `!` predicates
        self.fail_at = 0
        self.expected: set[str] = set()
        self.errors: list[tuple[int, str, str]] = []
        self.or_memo: dict[int, tuple[Node, int] | None] = {}
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

    def parse(self) -> Node:
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

    def _input(self) -> Node | None:
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

    def _or(self, index: int) -> tuple[Node, int] | None:
        # OrExpression <- AndExpression _ "or" _ OrExpression / AndExpression / Collection
        if index in self.or_memo:
            return self.or_memo[index]
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _TooDeepError(index)
        try:
            operands: list[Node] = []
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
        result: tuple[Node, int] | None = None
        if operands:
            node = operands[0] if len(operands) == 1 else Or(tuple(operands))
            result = (node, end)
        self.or_memo[index] = result
        return result

    def _and(self, index: int) -> tuple[Node, int] | None:
        # AndExpression <- NotExpression _ "and" _ AndExpression / NotExpression
        operands: list[Node] = []
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
        return (operands[0] if len(operands) == 1 else And(tuple(operands))), end

    def _not(self, index: int) -> tuple[Node, int] | None:
        # NotExpression <- "not" _ NotExpression / ParenthesizedExpression
        starts = [index]
        while (following := self._sequence(starts[-1], ("not", _WS))) is not None:
            starts.append(following)
        for count in range(len(starts) - 1, -1, -1):
            inner = self._paren(starts[count])
            if inner is not None:  # `not not x` is `x`
                return (Not(inner[0]) if count % 2 else inner[0]), inner[1]
        return None

    def _paren(self, index: int) -> tuple[Node, int] | None:
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

    def _match(self, index: int) -> tuple[Node, int] | None:
        # MatchExpression "match" <- SelectorOpValue / SelectorOp / ValueOpSelector
        selector = self._selector(index)
        if selector is not None:
            for operator, tokens in _OPS_SELECTOR_VALUE:
                after = self._sequence(selector[1], tokens)
                if after is not None:
                    value = self._value(after)
                    if value is not None:
                        return Match(operator, selector[0], value[0]), value[1]
                    break
        selector = self._selector(index)
        if selector is not None:
            for operator, tokens in _OPS_SELECTOR:
                after = self._sequence(selector[1], tokens)
                if after is not None:
                    return Match(operator, selector[0], None), after
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
                        return Match(operator, target[0], value[0]), target[1]
                else:
                    self.invert = not self.invert
                    target = self._selector(after)
                    self.invert = not self.invert
                    if target is None:
                        self._error(after, "match", "Invalid selector")
                break
        return None

    def _selector(self, index: int) -> tuple[Selector, int] | None:
        # Selector "selector" <- Identifier SelectorOrIndex* / '"' JsonPointerSegment* '"'
        end = self._identifier(index)
        if end is not None:
            path = [self.text[index:end]]
            while (part := self._selector_or_index(end)) is not None:
                path.append(part[0])
                end = part[1]
            return Selector(tuple(path), pointer=False), end
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
        return Selector(parts, pointer=True), end

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
                    value = go_unquote(self.text[index:closed])
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

    def _collection(self, index: int) -> tuple[Node, int] | None:
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
        node = Collection(quantifier, selector[0], default, index_name, value_name, body[0])
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
