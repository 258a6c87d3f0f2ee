"""What a real node changes on this machine, recorded before it starts and undone after it stops.

A kubelet, containerd, CNI plugins and kube-proxy write outside their own folders: sysctls,
iptables chains and the jumps to them, network links, mounts, `kubepods` cgroups and a few
hard-coded paths (docs/real-node.md lists them). `HostSnapshot.take()` records the state that
existed before; `HostSnapshot.undo()` removes what was added since, and only that, so the
machine is left as it was found even after a crash of the node's processes.
`SavedSnapshot` keeps a snapshot on disk while its node runs, so that when the run is killed
(and `undo()` never runs) the next node's start can undo it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Sysctls that the kubelet, the bridge plugin and kube-proxy are known to set.
SYSCTLS = (
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "net/ipv6/conf/all/forwarding",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_max",
)
# Folders some component writes to whatever its flags say; removed if they did not exist.
GLOBAL_PATHS = (
    "/run/containerd",
    "/run/runc",
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/var/run/nri",
    "/opt/containerd",
    "/etc/cni",
    "/opt/cni",
)
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_TABLES = ("filter", "nat", "mangle", "raw")
_IPTABLES = (("iptables", "iptables-save"), ("ip6tables", "ip6tables-save"))


@dataclass
class HostSnapshot:
    """The parts of the host a node may change, as they were before it started."""

    sysctls: dict[str, str] = field(default_factory=dict)
    chains: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (tool, table)
    rules: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    links: set[str] = field(default_factory=set)
    paths: set[str] = field(default_factory=set)

    @classmethod
    def take(cls) -> HostSnapshot:
        snapshot = cls()
        for name in SYSCTLS:
            with contextlib.suppress(OSError):
                snapshot.sysctls[name] = Path("/proc/sys", name).read_text().strip()
        for tool, save in _IPTABLES:
            for table in _TABLES:
                chains, rules = _iptables(save, table)
                snapshot.chains[(tool, table)] = chains
                snapshot.rules[(tool, table)] = rules
        snapshot.links = set(links())
        snapshot.paths = {p for p in GLOBAL_PATHS if os.path.lexists(p)}
        return snapshot

    def to_json(self) -> dict[str, Any]:
        """A JSON value of the snapshot: sets become sorted lists, (tool, table) "tool table"."""
        return {
            "sysctls": dict(sorted(self.sysctls.items())),
            "chains": _tables_to_json(self.chains),
            "rules": _tables_to_json(self.rules),
            "links": sorted(self.links),
            "paths": sorted(self.paths),
        }

    @classmethod
    def from_json(cls, value: object) -> HostSnapshot:
        """The snapshot `to_json` gave; ValueError naming the field when it is not one."""
        if not isinstance(value, dict):
            raise ValueError("a snapshot must be a JSON object")
        sysctls = value.get("sysctls")
        if not isinstance(sysctls, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in sysctls.items()
        ):
            raise ValueError("sysctls must be an object of strings")
        return cls(
            sysctls=dict(sysctls),
            chains=_tables_from_json(value.get("chains"), "chains"),
            rules=_tables_from_json(value.get("rules"), "rules"),
            links=set(_strings(value.get("links"), "links")),
            paths=set(_strings(value.get("paths"), "paths")),
        )

    def undo(self, *, state_dirs: list[Path], marker: str) -> list[str]:
        """Remove what was added since `take()`; returns what it found to remove.

        `state_dirs` are the node's own folders (mounts under them are unmounted); `marker`
        is a string in the command line of every process the node started (its shims included).
        """
        found: list[str] = []
        found += kill_marked_processes(marker)
        found += kill_cgroup_processes()
        found += unmount_under([*state_dirs, *(Path(p) for p in GLOBAL_PATHS)])
        found += remove_kubepods_cgroups()
        for name in sorted(set(links()) - self.links):
            subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
            found.append(f"link {name}")
        found += self._undo_iptables()
        for name, value in self.sysctls.items():
            path = Path("/proc/sys", name)
            with contextlib.suppress(OSError):
                if path.read_text().strip() != value:
                    path.write_text(value)
                    found.append(f"sysctl {name}")
        for folder in GLOBAL_PATHS:
            if folder not in self.paths and os.path.lexists(folder):
                shutil.rmtree(folder, ignore_errors=True)
                found.append(f"path {folder}")
        return found

    def _undo_iptables(self) -> list[str]:
        found: list[str] = []
        for tool, save in _IPTABLES:
            for table in _TABLES:
                before_chains = self.chains.get((tool, table), set())
                before_rules = self.rules.get((tool, table), set())
                chains, rules = _iptables(save, table)
                for rule in sorted(rules - before_rules):
                    args = shlex.split(rule)  # "-A CHAIN ..." -> "-D CHAIN ..."
                    if args[1] not in before_chains:
                        continue  # a chain of its own: flushed and deleted below
                    subprocess.run(
                        [tool, "-w", "-t", table, "-D", *args[1:]],
                        capture_output=True,
                        check=False,
                    )
                    found.append(f"{tool} -t {table} {rule}")
                added = sorted(chains - before_chains)
                for flag in ("-F", "-X"):  # empty every new chain first: they jump to each other
                    for chain in added:
                        argv = [tool, "-w", "-t", table, flag, chain]
                        subprocess.run(argv, capture_output=True, check=False)
                for chain in added:
                    found.append(f"{tool} -t {table} chain {chain}")
        return found


@dataclass
class SavedSnapshot:
    """A running node's snapshot and what its `undo` needs, kept in a file until the node
    stops: a killed run never stops, and the next start (which cannot know the dead run's
    folder) undoes it from this file."""

    snapshot: HostSnapshot
    state_dirs: list[Path]
    marker: str

    def save(self, path: Path) -> None:
        """Write the file whole or not at all (a kill may come at any moment): temp + rename."""
        value = {
            "snapshot": self.snapshot.to_json(),
            "state_dirs": [str(d) for d in self.state_dirs],
            "marker": self.marker,
        }
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(value, indent=1))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> SavedSnapshot:
        """The file `save` wrote; OSError when unreadable, ValueError when not such a file."""
        value = json.loads(path.read_text())
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
        # Everything under the folders is unmounted and every process naming the marker is
        # killed: a folder too high up or a marker outside them would reach far beyond a node.
        state_dirs = [Path(d) for d in _strings(value.get("state_dirs"), "state_dirs")]
        if not state_dirs or any(not d.is_absolute() or len(d.parts) < 3 for d in state_dirs):
            raise ValueError("state_dirs must be folders at least two levels below /")
        marker = value.get("marker")
        if not isinstance(marker, str) or not any(marker.startswith(f"{d}/") for d in state_dirs):
            raise ValueError("marker must be a path inside one of state_dirs")
        return cls(
            snapshot=HostSnapshot.from_json(value.get("snapshot")),
            state_dirs=state_dirs,
            marker=marker,
        )

    def undo(self) -> list[str]:
        return self.snapshot.undo(state_dirs=self.state_dirs, marker=self.marker)


def summary(changes: list[str], shown: int = 10) -> str:
    """`changes` (what `undo` returns) counted by kind, with the first `shown` of them: a killed
    run's leftovers run to a few hundred lines (one per iptables rule), too many for a warning."""
    kinds: dict[str, int] = {}
    for change in changes:
        words = change.split()
        kind = words[0] if words else "?"
        if kind in ("iptables", "ip6tables"):
            kind += " chain" if "chain" in words[3:4] else " rule"
        kinds[kind] = kinds.get(kind, 0) + 1
    counted = ", ".join(f"{kind}: {count}" for kind, count in kinds.items())
    lines = "".join(f"\n  {change}" for change in changes[:shown])
    more = f"\n  ... and {len(changes) - shown} more" if len(changes) > shown else ""
    return f"{len(changes)} ({counted}){lines}{more}" if changes else "none"


def _tables_to_json(tables: dict[tuple[str, str], set[str]]) -> dict[str, list[str]]:
    return {f"{tool} {table}": sorted(lines) for (tool, table), lines in sorted(tables.items())}


def _tables_from_json(value: object, what: str) -> dict[tuple[str, str], set[str]]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object of 'tool table' keys")
    tables: dict[tuple[str, str], set[str]] = {}
    for key, lines in value.items():
        tool, _, table = str(key).partition(" ")
        if not tool or not table or " " in table:
            raise ValueError(f"{what}: {key!r} is not 'tool table'")
        tables[(tool, table)] = set(_strings(lines, f"{what} {key}"))
    return tables


def _strings(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings")
    return list(value)


def links() -> list[str]:
    return [p.name for p in Path("/sys/class/net").iterdir()]


def mounts() -> list[str]:
    """Mount points of this mount namespace, in mount order."""
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            points.append(line.split()[4].replace("\\040", " "))
    return points


def unmount_under(folders: list[Path]) -> list[str]:
    """Lazily unmount every mount point at or under one of `folders`, newest first."""
    prefixes = [str(f.resolve()) if f.exists() else str(f) for f in folders]
    found = []
    for point in reversed(mounts()):
        if any(point == p or point.startswith(p.rstrip("/") + "/") for p in prefixes):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
            found.append(f"mount {point}")
    return found


def kill_marked_processes(marker: str) -> list[str]:
    """SIGKILL every process whose command line holds `marker` (the node's shims, mostly)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)
                found.append(f"process {proc.name} {cmdline[:80]}")
    return found


def _kubepods_dirs() -> list[Path]:
    found: list[Path] = []
    if not _CGROUP_ROOT.is_dir():
        return found
    for controller in _CGROUP_ROOT.iterdir():
        top = controller / "kubepods"
        if top.is_dir():
            found += sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            found.append(top)
    return found


def kill_cgroup_processes() -> list[str]:
    """SIGKILL what still runs in the kubelet's `kubepods` cgroups (containers of pods)."""
    found = []
    for folder in _kubepods_dirs():
        with contextlib.suppress(OSError):
            for pid in (folder / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
                    found.append(f"process {pid} in {folder}")
    return found


def remove_kubepods_cgroups() -> list[str]:
    """Remove the kubelet's cgroups, deepest first, once the processes in them are gone."""
    found = []
    deadline = time.monotonic() + 10
    for folder in _kubepods_dirs():
        while True:
            try:
                folder.rmdir()
                found.append(f"cgroup {folder}")
                break
            except FileNotFoundError:
                break
            except OSError:  # busy for a moment while killed processes exit
                if time.monotonic() > deadline:
                    log.warning("could not remove cgroup %s", folder)
                    break
                time.sleep(0.05)
    return found


def _iptables(save: str, table: str) -> tuple[set[str], set[str]]:
    """(chains, rules) of one table as `*-save` prints them; empty if the tool is missing."""
    try:
        out = subprocess.run(
            [save, "-t", table], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return set(), set()
    chains = {line[1:].split()[0] for line in out.splitlines() if line.startswith(":")}
    rules = {line for line in out.splitlines() if line.startswith("-A ")}
    return chains, rules
