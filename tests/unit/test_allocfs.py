"""`alloc fs`'s pure parts: Nomad paths onto the pod, Go's mode strings and content types,
and the parsing of what the in-container script prints (model.allocfs, cluster.podfs)."""

from __future__ import annotations

import stat as st

import pytest

from allocbridge.cluster.podfs import Entry, FsError, parse_listing, parse_stat
from allocbridge.model import allocfs
from allocbridge.model.allocfs import Location, NoSuchPathError, PathEscapesError, locate

TASKS = ["web", "sidecar"]


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("/", Location("", "root")),
        ("", Location("", "root")),
        ("./alloc/..", Location("", "root")),
        ("alloc", Location("alloc", "file", "", "/alloc", "/alloc")),
        ("/alloc/logs/", Location("alloc/logs", "file", "", "/alloc", "/alloc/logs")),
        ("web", Location("web", "task", "web")),
        ("web/local/a/../b", Location("web/local/b", "file", "web", "/local", "/local/b")),
        ("sidecar/tmp", Location("sidecar/tmp", "file", "sidecar", "/tmp", "/tmp")),
        ("web/secrets/x", Location("web/secrets/x", "file", "web", "/secrets", "/secrets/x")),
    ],
)
def test_nomad_paths_map_onto_the_pod(path: str, want: Location) -> None:
    assert locate(path, TASKS) == want


@pytest.mark.parametrize("path", ["..", "/../alloc", "alloc/../../x", "web/local/../../.."])
def test_dot_dot_above_the_top_escapes(path: str) -> None:
    with pytest.raises(PathEscapesError, match=r"^Path escapes the alloc directory$"):
        locate(path, TASKS)


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("nope", "stat nope: no such file or directory"),
        ("web/private", "stat web/private: no such file or directory"),
        ("web/local/../nope", "stat web/nope: no such file or directory"),
    ],
)
def test_names_the_directory_lacks_are_missing(path: str, text: str) -> None:
    with pytest.raises(NoSuchPathError) as caught:
        locate(path, TASKS)
    assert str(caught.value.args[0]) == text


def test_names_and_secrets() -> None:
    assert locate("/", TASKS).name == "/"
    assert locate("alloc/data/x.txt", TASKS).name == "x.txt"
    assert locate("web/secrets/token", TASKS).secret
    assert not locate("web/local/token", TASKS).secret


@pytest.mark.parametrize(
    ("mode", "text"),
    [
        (st.S_IFREG | 0o644, "-rw-r--r--"),
        (st.S_IFDIR | 0o755, "drwxr-xr-x"),
        (st.S_IFLNK | 0o777, "Lrwxrwxrwx"),
        (st.S_IFDIR | st.S_ISVTX | 0o777, "dtrwxrwxrwx"),
        (st.S_IFREG | st.S_ISUID | 0o755, "urwxr-xr-x"),
        (st.S_IFCHR | 0o666, "Dcrw-rw-rw-"),
        (st.S_IFBLK | 0o660, "Drw-rw----"),
        (st.S_IFIFO | 0o600, "prw-------"),
        (st.S_IFSOCK | 0o755, "Srwxr-xr-x"),
        (st.S_IFREG | st.S_ISGID | 0o2750, "grwxr-x---"),
    ],
)
def test_go_file_mode_strings(mode: int, text: str) -> None:
    assert allocfs.go_file_mode(mode) == text


@pytest.mark.parametrize(
    ("path", "head", "kind"),
    [
        ("a.txt", b"hello\n", "text/plain; charset=utf-8"),
        ("a.json", b"\x00\x01", "application/json"),
        ("empty", b"", "application/octet-stream"),
        ("bin", b"\x7fELF\x02\x01\x01\x00", "application/octet-stream"),
        ("page", b"  <!doctype html><p>", "text/html; charset=utf-8"),
        ("x", b"<?xml version='1.0'?>", "text/xml; charset=utf-8"),
        ("img", b"\x89PNG\r\n\x1a\n....", "image/png"),
        ("z", b"\x1f\x8b\x08\x00", "application/x-gzip"),
        ("doc", b"%PDF-1.7", "application/pdf"),
    ],
)
def test_content_types_as_go_sniffs_them(path: str, head: bytes, kind: str) -> None:
    assert allocfs.content_type(path, head) == kind


def test_file_info_is_nomads_shape() -> None:
    info = allocfs.file_info("a", st.S_IFREG | 0o640, 12, 1_764_115_200, content_type="x/y")
    assert info == {
        "Name": "a",
        "IsDir": False,
        "Size": 12,
        "FileMode": "-rw-r-----",
        "ModTime": "2025-11-26T00:00:00Z",
        "ContentType": "x/y",
    }
    assert "ContentType" not in allocfs.file_info("a", st.S_IFDIR | 0o755, 0, 0)


def test_stat_output() -> None:
    found = parse_stat(b"81a4 6 1764115200\nhello\n")
    assert (found.mode, found.size, found.mtime, found.head) == (
        0o100644,
        6,
        1764115200,
        b"hello\n",
    )
    with pytest.raises(FsError, match="unreadable stat output"):
        parse_stat(b"stat: can't stat\n")


def test_listing_output_with_odd_names() -> None:
    output = (
        b"81a4 6 1764115200 ./hello.txt\n"
        b"a1ff 9 1764115200 ./link\n"
        b"81a4 3 1764115200 ./two\nlines\n"
        b"41ed 4096 1764115200 ./ spaced -n\n"
    )
    assert parse_listing(output) == [
        Entry("hello.txt", 0o100644, 6, 1764115200),
        Entry("link", 0o120777, 9, 1764115200),
        Entry("two\nlines", 0o100644, 3, 1764115200),
        Entry(" spaced -n", 0o40755, 4096, 1764115200),
    ]
    assert parse_listing(b"") == []
