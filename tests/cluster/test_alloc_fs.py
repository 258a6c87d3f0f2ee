"""`nomad alloc fs` on the real node: the allocation directory read inside the task's
container (`/v1/client/fs/stat|ls|cat|readat|stream`), the refusals of paths that escape it
(`..`, symlinks out of their directory), Nomad's error texts and codes, and a file name that
would run commands if it ever reached a shell as text.

The task (`scripted.files_task`) lays out its files when it starts; the mapping of Nomad paths
and the parsing of the container's output are unit-tested (tests/unit/test_allocfs.py).
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from running_operator import (
    Operator,
    http,
    make_namespace,
    quick_allocation,
    real_node_annotations,
)
from scripted import HOSTILE_NAME, files_task, process_states

from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture(scope="module")
def files_namespace(cluster: Any, kubectl: Any) -> Iterator[str]:
    """A namespace whose pods run on the real node (skips, saying why, without one)."""
    annotations = real_node_annotations(cluster)
    yield from make_namespace(kubectl, f"fs-{uuid.uuid4().hex[:10]}", annotations)


@pytest.fixture(scope="module")
def files_alloc(operator: Operator, kubectl: Any, files_namespace: str) -> str:
    """The ID of a running allocation on the real node whose task has laid out its files."""
    kubectl.apply(quick_allocation("files", files_namespace, tasks=[files_task()]))
    uid = str(kubectl.json("get", "allocation", "files", "-n", files_namespace)["metadata"]["uid"])

    def laid_out() -> bool:
        status, _, _ = http(f"{operator.api}/v1/client/fs/stat/{uid}?path=alloc/data/grow.log")
        return status == 200

    eventually(laid_out, timeout=120, what="the task to run and lay out its files")
    return uid


def fs(operator: Operator, op: str, alloc_id: str, **query: str) -> tuple[int, bytes]:
    status, body, _ = http(
        f"{operator.api}/v1/client/fs/{op}/{alloc_id}?" + urllib.parse.urlencode(query)
    )
    return status, body


def test_stat_gives_nomads_file_info(operator: Operator, files_alloc: str) -> None:
    status, body = fs(operator, "stat", files_alloc, path="alloc/data/hello.txt")
    assert status == 200, body
    info = json.loads(body)
    assert {k: info[k] for k in ("Name", "IsDir", "Size", "FileMode", "ContentType")} == {
        "Name": "hello.txt",
        "IsDir": False,
        "Size": 6,
        "FileMode": "-rw-r--r--",
        "ContentType": "text/plain; charset=utf-8",
    }
    assert RFC3339.match(info["ModTime"]), info
    _, body = fs(operator, "stat", files_alloc, path="main/local/conf.json")
    assert json.loads(body)["ContentType"] == "application/json"
    _, body = fs(operator, "stat", files_alloc, path="main/local/sub")
    info = json.loads(body)
    assert (info["Name"], info["IsDir"], info["FileMode"]) == ("sub", True, "drwxr-xr-x")


def test_ls_maps_the_allocation_directory(operator: Operator, files_alloc: str) -> None:
    def names(path: str) -> dict[str, dict[str, Any]]:
        status, body = fs(operator, "ls", files_alloc, path=path)
        assert status == 200, body
        return {entry["Name"]: entry for entry in json.loads(body)}

    assert set(names("/")) == {"alloc", "main"}
    assert set(fs_root := names("")) == {"alloc", "main"} and fs_root["alloc"]["IsDir"]
    assert {"local", "tmp"} <= set(names("main"))  # busybox has no /secrets
    data = names("alloc/data")
    assert {"hello.txt", "link", "up", "grow.log", HOSTILE_NAME} <= set(data)
    assert data["link"]["FileMode"] == "Lrwxrwxrwx"  # lstat, as Nomad's ReadDir
    assert not data["link"]["IsDir"]
    assert set(names("main/local")) >= {"digits.txt", "conf.json", "sub", "passwd"}


def test_cat_and_readat_read_inside_the_container(operator: Operator, files_alloc: str) -> None:
    assert fs(operator, "cat", files_alloc, path="alloc/data/hello.txt") == (200, b"hello\n")
    assert fs(operator, "cat", files_alloc, path="alloc/data/link") == (200, b"hello\n")
    assert fs(operator, "cat", files_alloc, path="main/local/sub/../digits.txt") == (
        200,
        b"0123456789",
    )
    query = {"path": "main/local/digits.txt", "offset": "3", "limit": "4"}
    assert fs(operator, "readat", files_alloc, **query) == (200, b"3456")
    query = {"path": "main/local/digits.txt", "offset": "7", "limit": "-1"}
    assert fs(operator, "readat", files_alloc, **query) == (200, b"789")


def test_a_hostile_name_is_an_argument_not_shell_text(operator: Operator, files_alloc: str) -> None:
    path = f"alloc/data/{HOSTILE_NAME}"
    assert fs(operator, "cat", files_alloc, path=path) == (200, b"odd")
    assert fs(operator, "stat", files_alloc, path=path)[0] == 200
    assert fs(operator, "ls", files_alloc, path="alloc/data")[0] == 200  # runs in alloc/data
    assert fs(operator, "ls", files_alloc, path="/")[0] == 200
    for where in ("alloc/data", "main/local"):
        status, body = fs(operator, "stat", files_alloc, path=f"{where}/pwned")
        assert (status, body) == (404, f"stat {where}/pwned: no such file or directory".encode())


def test_stream_frames_from_the_end_and_following(
    operator: Operator, files_alloc: str, kubectl: Any, files_namespace: str
) -> None:
    query = {"path": "main/local/digits.txt", "origin": "end", "offset": "3", "follow": "false"}
    status, body = fs(operator, "stream", files_alloc, **query)
    assert status == 200, body
    frame = json.loads(body)
    assert frame == {
        "Offset": 10,
        "Data": base64.b64encode(b"789").decode(),
        "File": "main/local/digits.txt",
    }
    # Following the growing log: frames keep coming, each with the next line(s).
    grow = "path=alloc/data/grow.log&origin=end&offset=0"
    url = f"{operator.api}/v1/client/fs/stream/{files_alloc}?{grow}"
    with urllib.request.urlopen(url, timeout=30) as response:
        decoder = json.JSONDecoder()
        seen = b""
        buffer = ""
        while seen.count(b"\n") < 2:
            buffer += response.read1(4096).decode()
            while buffer:
                try:
                    obj, end = decoder.raw_decode(buffer)
                except ValueError:
                    break
                buffer = buffer[end:]
                seen += base64.b64decode(obj.get("Data", ""))
    assert re.match(rb"line \d+\nline \d+\n", seen), seen  # whole lines: new ones, from the end
    # The client went away: the exec's stdin closed, and the script stopped its `tail -f`.
    eventually(
        lambda: "tail" not in process_states(kubectl, files_namespace, "files", "main"),
        timeout=20,
        what="the follower's tail -f to end in the container",
    )


@pytest.mark.parametrize(
    ("op", "query", "status", "text"),
    [
        ("ls", {"path": "alloc/../.."}, 400, "Path escapes the alloc directory"),
        ("stat", {"path": "../x"}, 400, "Path escapes the alloc directory"),
        ("cat", {"path": "main/local/passwd"}, 400, "Path escapes the alloc directory"),
        ("ls", {"path": "alloc/data/up"}, 400, "Path escapes the alloc directory"),
        ("stat", {"path": "alloc/data/up/passwd"}, 400, "Path escapes the alloc directory"),
        ("stat", {"path": "alloc/nope"}, 404, "stat alloc/nope: no such file or directory"),
        ("cat", {"path": "alloc/nope"}, 404, "stat alloc/nope: no such file or directory"),
        ("ls", {"path": "nosuchtask"}, 404, "stat nosuchtask: no such file or directory"),
        ("stat", {}, 400, "must provide a file name"),
        ("cat", {}, 400, "must provide a file name"),
        (
            "readat",
            {"path": "alloc/data/hello.txt"},
            400,
            'error parsing offset: strconv.ParseInt: parsing "": invalid syntax',
        ),
        (
            "stream",
            {"path": "alloc/data/hello.txt", "origin": "middle"},
            400,
            "origin must be start or end",
        ),
        ("cat", {"path": "alloc/data"}, 400, 'file "alloc/data" is a directory'),
        ("cat", {"path": "/"}, 400, 'file "/" is a directory'),
        (
            "ls",
            {"path": "alloc/data/hello.txt"},
            400,
            "readdir alloc/data/hello.txt: not a directory",
        ),
        (
            "cat",
            {"path": "main/secrets/token"},
            403,
            "Reading secret file prohibited: main/secrets/token",
        ),
    ],
)
def test_refusals_with_nomads_texts(
    operator: Operator, files_alloc: str, op: str, query: dict[str, str], status: int, text: str
) -> None:
    assert fs(operator, op, files_alloc, **query) == (status, text.encode())


def test_an_unknown_allocation_is_nomads_404(operator: Operator, files_alloc: str) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    for op in ("stat", "ls", "cat", "readat", "stream"):
        status, body = fs(operator, op, unknown, path="alloc", offset="0")
        assert (status, body) == (404, f'Unknown allocation "{unknown}"'.encode()), op


def test_the_real_kubelet_serves_stdout_and_stderr_apart(
    operator: Operator, files_alloc: str
) -> None:
    """The task writes `out N` to stdout and `err N` to stderr: each log type holds its own."""
    logs = f"{operator.api}/v1/client/fs/logs/{files_alloc}?task=main&plain=true"

    def both() -> tuple[bytes, bytes] | None:
        status, stdout, _ = http(f"{logs}&type=stdout")
        assert status == 200, stdout
        status, stderr, _ = http(f"{logs}&type=stderr")
        assert status == 200, stderr
        return (stdout, stderr) if stdout.count(b"\n") >= 2 and stderr.count(b"\n") >= 2 else None

    stdout, stderr = eventually(both, what="two lines of each stream")
    assert stdout.startswith(b"out 1\nout 2\n") and b"err" not in stdout, stdout
    assert stderr.startswith(b"err 1\nerr 2\n") and b"out" not in stderr, stderr


def test_an_image_without_a_shell_is_told_apart_from_a_fault(
    operator: Operator, kubectl: Any, files_namespace: str
) -> None:
    """The sandbox image has tini and BusyBox but no `sh`: alloc fs cannot read inside it, and
    says so with a 501 naming what it needs, not an internal 500."""
    task = {"name": "main", "driver": "docker", "config": {"image": "allocbridge.local/pause:3.10"}}
    kubectl.apply(quick_allocation("toolless", files_namespace, tasks=[task]))
    uid = str(
        kubectl.json("get", "allocation", "toolless", "-n", files_namespace)["metadata"]["uid"]
    )

    def running() -> bool:
        status, body, _ = http(f"{operator.api}/v1/allocation/{uid}")
        return status == 200 and json.loads(body)["ClientStatus"] == "running"

    eventually(running, timeout=120, what="the shell-less task to run")
    status, body = fs(operator, "cat", uid, path="main/local/anything")
    assert status == 501, body
    assert b"sh" in body and b'task "main"' in body, body
