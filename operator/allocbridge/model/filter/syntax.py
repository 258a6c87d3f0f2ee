"""Syntax tree: what the parser builds and the evaluator compiles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True, slots=True)
class Selector:
    path: tuple[str, ...]
    pointer: bool  # written as a JSON pointer ("/a/b") rather than dotted

    @property
    def text(self) -> str:
        """go-bexpr's `Selector.String()`: also the raw value of a bare word used as a value."""
        return ("/" if self.pointer else ".").join(self.path)


@dataclass(frozen=True, slots=True)
class Match:
    operator: str
    selector: Selector
    raw: str | None


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Collection:
    quantifier: str  # "any" or "all"
    selector: Selector
    default: str | None
    index: str | None
    value: str | None
    body: Node


Node: TypeAlias = Match | Not | And | Or | Collection
