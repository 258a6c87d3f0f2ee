"""Evaluation: the syntax tree becomes nested closures with everything static precomputed.

Every literal keeps its raw text; it is converted with Go's `strconv` rules (`ParseBool`,
`ParseInt`/`ParseUint` base 0, `ParseFloat`) against the kind of the value it meets. The
conversions and the regular expressions are computed once, at compile time; their errors are
raised when evaluation reaches them, as go-bexpr does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

from allocbridge.model.filter.errors import FilterEvaluationError
from allocbridge.model.filter.regex import compile_regex
from allocbridge.model.filter.shape import MAP, POINTER, SLICE, UNSIGNED, ShapeIndex
from allocbridge.model.filter.strconv import (
    NumError,
    parse_bool,
    parse_float,
    parse_int,
    parse_uint,
)
from allocbridge.model.filter.syntax import And, Collection, Match, Node, Not, Or, Selector
from allocbridge.model.goformat import go_quote


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


Test: TypeAlias = Callable[[Any, _Frame | None], bool]
_Getter: TypeAlias = Callable[[Any, _Frame | None], tuple[Any, int]]


def _pointer_text(path: tuple[str, ...]) -> str:
    """pointerstructure's `Pointer.String()`, the path shown in resolution errors."""
    if not path:
        return "/"
    return "/" + "/".join(part.replace("~", "~0").replace("/", "~1") for part in path)


def _kind(value: object, hint: int) -> str:
    """The Go `reflect.Kind` name go-bexpr would see for this JSON value."""
    if value is None:
        if hint & MAP:
            return "map"
        if hint & SLICE:
            return "slice"
        return "invalid"  # a nil pointer, dereferenced
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "uint64" if hint & UNSIGNED else "int"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "map" if hint & MAP else "struct"
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
        index = parse_int(part or "0")
    except NumError:
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
            if not hint & MAP:
                raise _resolution_error(
                    pointer,
                    part_index,
                    f"couldn't find key: struct field with name {go_quote(part)}",
                )
        elif isinstance(current, list | tuple):
            current = current[_slice_index(pointer, part_index, part, len(current))]
            continue
        elif current is None and hint & SLICE:
            _slice_index(pointer, part_index, part, 0)
        elif current is not None or not hint & MAP:
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
            ("bool", parse_bool),
            ("int", parse_int),
            ("uint64", parse_uint),
            ("float64", parse_float),
        ):
            try:
                self.by_kind[kind] = parse(raw)
            except NumError as error:
                self.by_kind[kind] = error

    def converted(self, kind: str) -> object:
        """The literal as this kind; a `NumError` when Go's strconv would refuse it."""
        return self.by_kind.get(kind, self.raw)


def _conversion_error(error: NumError) -> FilterEvaluationError:
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
    if isinstance(converted, NumError):
        raise _conversion_error(converted)
    return bool(value == converted)


def _list_contains(literal: _Literal, items: list[Any] | tuple[Any, ...]) -> bool:
    """`in` on a list: a typed slice if the elements share a kind, else an `[]interface{}`."""
    present = [item for item in items if item is not None]
    kinds = {_kind(item, 0) for item in present}
    if len(kinds) == 1:
        (kind,) = kinds
        converted = literal.converted(kind)
        if isinstance(converted, NumError):
            raise _conversion_error(converted)
        if kind not in _PRIMITIVE_KINDS:
            raise FilterEvaluationError(
                'unable to find suitable primitive comparison function for "in" comparison'
            )
        return any(item == converted for item in present)
    for item in present:
        kind = _kind(item, 0)
        converted = literal.converted(kind)
        if isinstance(converted, NumError):
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
        if isinstance(converted, NumError):
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
    if kind in ("map", "slice", "struct") or hint & POINTER:
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


class Compiler:
    def __init__(self, shape: ShapeIndex) -> None:
        self.shape = shape

    def compile(self, node: Node, scope: frozenset[str]) -> Test:
        if isinstance(node, Match):
            return self._match(node, scope)
        if isinstance(node, Not):
            operand = self.compile(node.operand, scope)
            return lambda root, frame: not operand(root, frame)
        if isinstance(node, And):
            operands = tuple(self.compile(item, scope) for item in node.operands)

            def all_of(root: Any, frame: _Frame | None) -> bool:
                for operand in operands:  # noqa: SIM110 - a generator costs more per datum
                    if not operand(root, frame):
                        return False
                return True

            return all_of
        if isinstance(node, Or):
            alternatives = tuple(self.compile(item, scope) for item in node.operands)

            def any_of(root: Any, frame: _Frame | None) -> bool:
                for alternative in alternatives:  # noqa: SIM110 - as above
                    if alternative(root, frame):
                        return True
                return False

            return any_of
        return self._collection(node, scope)

    def _getter(self, selector: Selector, scope: frozenset[str]) -> _Getter:
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
        if len(path) == 1 and not hints[0] & MAP:
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

    def _match(self, node: Match, scope: frozenset[str]) -> Test:
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
            pattern = compile_regex(literal.raw)

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

    def _collection(self, node: Collection, scope: frozenset[str]) -> Test:
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
            elif isinstance(value, Mapping) and hint & MAP:
                keys = list(value)
            elif value is None and hint & (MAP | SLICE):
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
