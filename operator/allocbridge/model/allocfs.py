"""Nomad's allocation directory as it maps onto an allocation's pod, as pure functions. No I/O.

Nomad's `alloc fs` paths are relative to the allocation directory: `alloc/` (shared by the
group's tasks, with `alloc/logs/` and `alloc/data/`) and one directory per task with `local/`,
`secrets/` and `tmp/`. In the pod (`model.pods`) every container mounts the shared `alloc`
emptyDir at `/alloc` and its own emptyDir at `/local`; `/secrets` and `/tmp` are the
container's own. So:

| Nomad path              | read in                        | container path    |
|-------------------------|--------------------------------|-------------------|
| `/`                     | nothing (made up: `alloc`, one directory per task) | -  |
| `alloc/...`             | any running task's container   | `/alloc/...`      |
| `<task>`                | the task's container           | (lists `local`, `secrets`, `tmp`) |
| `<task>/local/...`      | the task's container           | `/local/...`      |
| `<task>/secrets/...`    | the task's container           | `/secrets/...`    |
| `<task>/tmp/...`        | the task's container           | `/tmp/...`        |

A path is cleaned lexically first; a `..` that climbs above the allocation directory is
refused (`Path escapes the alloc directory`, Nomad's text). Symlinks are resolved inside the
container (`cluster.podfs`), and the result must stay inside the same container directory.
As in Nomad, files under `<task>/secrets` may be listed and stat'ed but not read.

`go_file_mode` writes Go's `os.FileMode.String()` from a raw `st_mode`, and `content_type`
follows Go's `http.DetectContentType` for the common signatures, as Nomad's `Stat` does.
"""

from __future__ import annotations

import stat as st
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

ALLOC: Final = "alloc"
SHARED_DIR: Final = "/alloc"
#: A task directory's entries and the container directories they are.
TASK_DIRS: Final = {"local": "/local", "secrets": "/secrets", "tmp": "/tmp"}
SECRETS: Final = "secrets"

ESCAPES: Final = "Path escapes the alloc directory"
#: Mode of the made-up directories (Nomad creates the allocation and task directories 0777).
VIRTUAL_DIR_MODE: Final = st.S_IFDIR | 0o777
VIRTUAL_DIR_SIZE: Final = 4096


class PathEscapesError(ValueError):
    def __init__(self) -> None:
        super().__init__(ESCAPES)


class NoSuchPathError(LookupError):
    """Go's `os.Stat` text, which Nomad's HTTP layer turns into a 404."""

    def __init__(self, path: str) -> None:
        super().__init__(f"stat {path}: no such file or directory")


@dataclass(frozen=True)
class Location:
    """Where one cleaned Nomad path is.

    `kind`: `root` (the allocation directory), `task` (a task's directory, `task` set) or
    `file` (inside a container directory: `task` is the container to read in, "" for the
    shared `alloc/`, which any running task's container mounts; `root` is the container
    directory the path must stay in, `container_path` the path itself).
    """

    path: str  # cleaned, no leading slash; "" for the allocation directory
    kind: Literal["root", "task", "file"]
    task: str = ""
    root: str = ""
    container_path: str = ""

    @property
    def name(self) -> str:
        """Go's `FileInfo.Name()` of the path (the allocation directory is "/")."""
        return self.path.rsplit("/", 1)[-1] if self.path else "/"

    @property
    def secret(self) -> bool:
        return self.kind == "file" and self.root == TASK_DIRS[SECRETS]


def clean(path: str) -> list[str]:
    """The path's parts after `.` and `..`; PathEscapesError if it climbs above the top."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise PathEscapesError()
            parts.pop()
        else:
            parts.append(part)
    return parts


def locate(path: str, tasks: list[str]) -> Location:
    """Map a Nomad path onto the pod; NoSuchPathError for names the directory does not hold."""
    parts = clean(path)
    cleaned = "/".join(parts)
    if not parts:
        return Location("", "root")
    head, rest = parts[0], parts[1:]
    if head == ALLOC:
        return Location(cleaned, "file", "", SHARED_DIR, "/".join([SHARED_DIR, *rest]))
    if head not in tasks:
        raise NoSuchPathError(cleaned)
    if not rest:
        return Location(cleaned, "task", head)
    directory = TASK_DIRS.get(rest[0])
    if directory is None:
        raise NoSuchPathError(cleaned)
    return Location(cleaned, "file", head, directory, "/".join([directory, *rest[1:]]))


# --- File information --------------------------------------------------------------------------


def _type_letters(mode: int) -> str:
    """Go's os.FileMode type and special bits in String()'s order (`dLDpSugct`), as Go maps
    a Unix `st_mode` onto them (a character device is `D` and `c`)."""
    fmt = st.S_IFMT(mode)
    bits = (
        ("d", fmt == st.S_IFDIR),
        ("L", fmt == st.S_IFLNK),
        ("D", fmt in (st.S_IFBLK, st.S_IFCHR)),
        ("p", fmt == st.S_IFIFO),
        ("S", fmt == st.S_IFSOCK),
        ("u", bool(mode & st.S_ISUID)),
        ("g", bool(mode & st.S_ISGID)),
        ("c", fmt == st.S_IFCHR),
        ("t", bool(mode & st.S_ISVTX)),
    )
    return "".join(letter for letter, on in bits if on)


def go_file_mode(mode: int) -> str:
    """Go's `os.FileMode.String()` of a Unix `st_mode`, e.g. `-rw-r--r--`, `drwxr-xr-x`."""
    letters = _type_letters(mode) or "-"
    return letters + "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwx" * 3))


def rfc3339(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def file_info(
    name: str, mode: int, size: int, mtime: int, *, content_type: str = ""
) -> dict[str, Any]:
    """Nomad's `AllocFileInfo` (`ContentType` only from Stat, as in Nomad)."""
    info: dict[str, Any] = {
        "Name": name,
        "IsDir": st.S_ISDIR(mode),
        "Size": size,
        "FileMode": go_file_mode(mode),
        "ModTime": rfc3339(mtime),
    }
    if content_type:
        info["ContentType"] = content_type
    return info


def virtual_dir(name: str, mtime: int) -> dict[str, Any]:
    return file_info(name, VIRTUAL_DIR_MODE, VIRTUAL_DIR_SIZE, mtime)


# --- Content types (Go's http.DetectContentType, the common signatures) ------------------------

OCTET_STREAM: Final = "application/octet-stream"
_WHITESPACE: Final = b"\t\n\x0c\r "
_HTML_TAGS: Final = (
    b"<!DOCTYPE HTML", b"<HTML", b"<HEAD", b"<SCRIPT", b"<IFRAME", b"<H1", b"<DIV", b"<FONT",
    b"<TABLE", b"<A", b"<STYLE", b"<TITLE", b"<B", b"<BODY", b"<BR", b"<P", b"<!--",
)  # fmt: skip
_EXACT: Final = (
    (b"%PDF-", "application/pdf"),
    (b"%!PS-Adobe-", "application/postscript"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"BM", "image/bmp"),
    (b"\x00\x00\x01\x00", "image/x-icon"),
    (b"OggS\x00", "application/ogg"),
    (b"\x1f\x8b\x08", "application/x-gzip"),
    (b"PK\x03\x04", "application/zip"),
    (b"Rar!\x1a\x07\x00", "application/x-rar-compressed"),
    (b"Rar!\x1a\x07\x01\x00", "application/x-rar-compressed"),
    (b"\x00asm", "application/wasm"),
    (b"\xfe\xff", "text/plain; charset=utf-16be"),
    (b"\xff\xfe", "text/plain; charset=utf-16le"),
    (b"\xef\xbb\xbf", "text/plain; charset=utf-8"),
)


def _is_binary_byte(b: int) -> bool:
    return b <= 0x08 or b == 0x0B or 0x0E <= b <= 0x1A or 0x1C <= b <= 0x1F


def content_type(path: str, head: bytes | None) -> str:
    """What Nomad's Stat reports: Go's sniffing of the first 512 bytes (`application/
    octet-stream` for a directory or an empty file, whose first read fails), `.json` always
    `application/json`."""
    if path.endswith(".json"):
        return "application/json"
    if not head:
        return OCTET_STREAM
    data = head[:512]
    for signature, kind in _EXACT:
        if data.startswith(signature):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    trimmed = data.lstrip(_WHITESPACE)
    if trimmed[:5] == b"<?xml":
        return "text/xml; charset=utf-8"
    upper = trimmed.upper()
    for tag in _HTML_TAGS:
        after = upper[len(tag) : len(tag) + 1]
        if upper.startswith(tag) and after in (b" ", b">"):
            return "text/html; charset=utf-8"
    if any(_is_binary_byte(b) for b in data):
        return OCTET_STREAM
    return "text/plain; charset=utf-8"
