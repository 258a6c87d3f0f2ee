"""JSON bytes as Nomad's encoder writes them: keys sorted, UTF-8 as is, no trailing newline.

Nomad's go-msgpack JSON handle walks struct fields in name order, so sorted keys match what
real clients and golden files see. The compact form is what the store pre-renders at upsert
time; the pretty form (`?pretty`) is 4-space indented with a trailing newline.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

_compact = json.JSONEncoder(
    separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False
)
_pretty = json.JSONEncoder(indent=4, sort_keys=True, ensure_ascii=False, allow_nan=False)


def compact(value: Any) -> bytes:
    """One-line JSON, as Nomad sends it by default.

    orjson writes the same bytes as the standard library's compact form, eight times faster
    (every change of an allocation encodes its stub); the one difference, a small float's
    exponent (`1e-7` for `1e-07`), reads as the same number. What orjson refuses (an integer
    beyond 64 bits, a key that is not a string) goes through the standard library.
    """
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return _compact.encode(value).encode("utf-8")


def pretty(value: Any) -> bytes:
    """Indented JSON plus a newline, as Nomad sends it for `?pretty`."""
    return _pretty.encode(value).encode("utf-8") + b"\n"


@dataclass(frozen=True)
class Fragments:
    """A compact JSON text kept as pieces: `separator.join(parts)`, never joined whole here.

    A list of 50,000 pre-rendered stubs is 40 MB: its pieces are laid out per request without
    copying them, and the response writes them a megabyte at a time. `length`, when the maker
    knows it, saves a pass over 50,000 objects scattered through the heap.
    """

    parts: Sequence[bytes]
    separator: bytes = b""
    length: int | None = None

    def size(self) -> int:
        """The length of the text, without joining it."""
        if self.length is not None:
            return self.length
        return sum(map(len, self.parts)) + len(self.separator) * max(0, len(self.parts) - 1)

    def join(self) -> bytes:
        return self.separator.join(self.parts)
