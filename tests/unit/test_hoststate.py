"""The real node's snapshot on disk (hoststate.SavedSnapshot), which lets the next start undo a
killed run, and what a start does with a file that is not one (realnode.undo_killed_run).

Undoing a good file changes the host; tests/cluster/test_real_node.py does that with a real
node. These need no root: the file alone."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from allocbridge_localcluster.hoststate import HostSnapshot, SavedSnapshot, summary
from allocbridge_localcluster.realnode import undo_killed_run

SNAPSHOT = HostSnapshot(
    sysctls={"net/ipv4/ip_forward": "0", "kernel/panic": "10"},
    chains={("iptables", "filter"): {"INPUT", "FORWARD"}, ("ip6tables", "nat"): set()},
    rules={("iptables", "filter"): {"-A INPUT -i lo -j ACCEPT"}, ("ip6tables", "nat"): set()},
    links={"lo", "eth0"},
    paths={"/opt/cni"},
)


NODE = "/tmp/pytest-of-root/pytest-1/killed0/node"


def test_a_saved_snapshot_reads_back_equal(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    saved = SavedSnapshot(SNAPSHOT, [Path(NODE)], f"{NODE}/containerd/containerd.sock")
    saved.save(path)
    assert SavedSnapshot.load(path) == saved
    assert not list(tmp_path.glob("*.tmp")), "the temporary file is renamed into place"


def test_the_file_holds_sorted_lists_and_tool_table_keys(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    SavedSnapshot(SNAPSHOT, [Path(NODE)], f"{NODE}/sock").save(path)
    value = json.loads(path.read_text())
    assert value["snapshot"]["links"] == ["eth0", "lo"]
    assert value["snapshot"]["chains"] == {
        "ip6tables nat": [],
        "iptables filter": ["FORWARD", "INPUT"],
    }
    assert value["state_dirs"] == [NODE] and value["marker"] == f"{NODE}/sock"


def saved_file(**changes: object) -> str:
    """A good file's text with some fields changed."""
    value: dict[str, object] = {
        "snapshot": SNAPSHOT.to_json(),
        "state_dirs": [NODE],
        "marker": f"{NODE}/sock",
    }
    return json.dumps(value | changes)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "Expecting value"),
        ('{"snapshot": {}, "state_dirs"', "Expecting"),
        ("[]", "not a JSON object"),
        (saved_file(state_dirs="/tmp"), "state_dirs must be a list"),
        (saved_file(state_dirs=[]), "state_dirs must be folders"),
        (saved_file(state_dirs=["/"]), "state_dirs must be folders"),
        (saved_file(state_dirs=["/tmp"]), "state_dirs must be folders"),
        (saved_file(state_dirs=["tmp/a/b"]), "state_dirs must be folders"),
        (saved_file(marker=""), "marker must be a path inside"),
        (saved_file(marker="/"), "marker must be a path inside"),
        (saved_file(marker=NODE), "marker must be a path inside"),
        (saved_file(snapshot={}), "sysctls"),
        (saved_file(snapshot={"sysctls": {"a": 1}}), "sysctls"),
    ],
)
def test_a_file_that_is_not_a_snapshot_is_a_value_error(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "node.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=why):
        SavedSnapshot.load(path)


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("chains", {"iptables": []}, "'iptables' is not 'tool table'"),
        ("rules", {"iptables filter": "-A X"}, "rules iptables filter must be a list"),
        ("links", ["lo", 3], "links must be a list of strings"),
        ("paths", None, "paths must be a list of strings"),
    ],
)
def test_each_field_of_the_snapshot_is_checked(field: str, value: object, why: str) -> None:
    snapshot = SNAPSHOT.to_json()
    snapshot[field] = value
    with pytest.raises(ValueError, match=why):
        HostSnapshot.from_json(snapshot)


def test_a_start_drops_a_corrupt_snapshot_file_with_a_warning_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "allocbridge-real-node.json"
    path.write_text('{"snapshot": {"sysctls"')
    with caplog.at_level(logging.WARNING):
        assert undo_killed_run(path) == []
    assert not path.exists()
    assert str(path) in caplog.text and "Expecting" in caplog.text


def test_without_a_file_a_start_has_nothing_to_undo(tmp_path: Path) -> None:
    assert undo_killed_run(tmp_path / "absent.json") == []


def test_the_warning_counts_changes_by_kind_and_shows_only_the_first() -> None:
    changes = [
        "process 41 in /tmp/x/node",
        "mount /tmp/x/node/pods",
        *[f"iptables -t nat -A KUBE-SVC-{i} -j KUBE-SEP-{i}" for i in range(12)],
        "iptables -t nat chain KUBE-SERVICES",
        "ip6tables -t filter chain KUBE-FIREWALL",
        "link abnode0",
    ]
    text = summary(changes, shown=3)
    assert text.startswith(
        "17 (process: 1, mount: 1, iptables rule: 12, iptables chain: 1, ip6tables chain: 1,"
        " link: 1)"
    )
    assert text.count("\n  ") == 4  # three changes and the line saying how many more
    assert "\n  mount /tmp/x/node/pods" in text
    assert text.endswith("... and 14 more")
    assert summary([]) == "none"
