"""Allocation IDs and ID prefixes, checked as Nomad's memdb UUID index checks them.

The checks run in memdb's order and fail with its reasons (lengths count UTF-8 bytes, as Go's
`len` does; the hex decoder names the first bad byte). Nomad answers these with 500; we answer
400, the status for bad input (design.md section 3; docs/api.md lists the difference), keeping
the text `alloc lookup failed: index error: <reason>`.
"""

from __future__ import annotations

import re
from typing import Final

from allocbridge.api.errors import NomadError
from allocbridge.model.goformat import go_unicode

_HEX: Final = frozenset(b"0123456789abcdefABCDEF")
UUID_LENGTH: Final = 36
#: What clients send nearly always: a canonical UUID, which decodes to itself.
_CANONICAL: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class InvalidUUIDError(ValueError):
    """Text that memdb's UUID index rejects; the message is memdb's reason."""


def decode_uuid_text(text: str, *, full: bool) -> str:
    """The lower-case hex digits of a UUID (`full`) or of a UUID prefix; raises InvalidUUIDError."""
    raw = text.encode("utf-8")
    if full and len(raw) != UUID_LENGTH:
        raise InvalidUUIDError("UUID must be 36 characters")
    if len(raw) > UUID_LENGTH:
        raise InvalidUUIDError(f"Invalid UUID length. UUID have 36 characters; got {len(raw)}")
    hyphens = raw.count(b"-")
    if hyphens > 4:
        raise InvalidUUIDError(f'UUID should have maximum of 4 "-"; got {hyphens}')
    digits = raw.replace(b"-", b"")
    if len(digits) % 2:
        raise InvalidUUIDError("Input (without hyphens) must be even length")
    for byte in digits:
        if byte not in _HEX:
            raise InvalidUUIDError(f"Invalid UUID: encoding/hex: invalid byte: {go_unicode(byte)}")
    return digits.decode("ascii").lower()


def lookup_error(exc: InvalidUUIDError, table: str = "alloc") -> NomadError:
    return NomadError(400, f"{table} lookup failed: index error: {exc}")


def parse_alloc_id(text: str) -> str | None:
    """The canonical ID to look up for a path `:alloc_id`; raises the 400 NomadError.

    Only full IDs work (no prefix resolution, as in Nomad). Hyphen placement and case do not
    matter, since memdb compares decoded bytes; 36 characters that decode to other than 16
    bytes are well-formed but can match nothing, which gives None.
    """
    return parse_full_id(text, "alloc")


def parse_full_id(text: str, table: str) -> str | None:
    """`parse_alloc_id` for any of memdb's UUID-keyed tables (`alloc`, `eval`), named in the
    error."""
    if _CANONICAL.fullmatch(text):
        return text  # the decode below gives it back, at 10 times the cost
    try:
        digits = decode_uuid_text(text, full=True)
    except InvalidUUIDError as exc:
        raise lookup_error(exc, table) from exc
    if len(digits) != 32:
        return None
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def parse_prefix(text: str) -> str:
    """The lower-case hex digits of a `prefix` query parameter; raises the 400 NomadError."""
    try:
        return decode_uuid_text(text, full=False)
    except InvalidUUIDError as exc:
        raise lookup_error(exc) from exc
