"""Reading a container's /proc/1 and choosing where a signal can go (no I/O)."""

from __future__ import annotations

import pytest

from allocbridge.model.pid1 import SIGKILL, SIGSTOP, SIGTERM, Pid1, parse, route

SIGHUP, SIGUSR1, SIGCONT = 1, 10, 18

# Trimmed from a real `cat /proc/1/status /proc/1/task/1/children` (sh with `trap` for TERM
# and HUP, two children); the children line has no newline, as the kernel writes it.
SHELL_WITH_TRAPS = (
    "Name:\tsh\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t1\nPid:\t1\nPPid:\t0\n"
    "SigQ:\t0/63382\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n"
    "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000004\nSigCgt:\t0000000000014003\n"
    "CapInh:\t0000000000000000\nvoluntary_ctxt_switches:\t12\n3 5 "
)
TINI = "Name:\ttini\nSigBlk:\tfffffffe7ffbfeff\nSigIgn:\t0000000000000000\nSigCgt:\t0\n7 "


def bare(*caught: int) -> Pid1:
    return Pid1(name="app", caught=frozenset(caught), blocked=frozenset(), children=())


def test_parse_reads_masks_and_children() -> None:
    pid1 = parse(SHELL_WITH_TRAPS, children_readable=True)
    assert pid1.name == "sh"
    assert pid1.caught == {1, 2, 15, 17}  # HUP INT TERM CHLD
    assert pid1.blocked == frozenset()
    assert pid1.children == (3, 5)


def test_parse_without_the_children_file() -> None:
    pid1 = parse(SHELL_WITH_TRAPS.rsplit("\n", 1)[0] + "\n", children_readable=False)
    assert pid1.children is None
    assert pid1.supervises  # it catches SIGCHLD: it waits for processes of its own


def test_an_empty_children_line_means_nothing_runs_below() -> None:
    pid1 = parse("Name:\tapp\nSigBlk:\t0\nSigCgt:\t0000000000004000\n", children_readable=True)
    assert pid1.children == () and not pid1.supervises


def test_kill_and_stop_never_reach_pid1_even_under_an_init() -> None:
    tini = parse(TINI, children_readable=True)
    assert not tini.receives(SIGKILL) and not tini.receives(SIGSTOP)
    assert route(tini, SIGKILL) == "-1" and route(tini, SIGSTOP) == "-1"


def test_an_init_that_blocks_signals_takes_them_at_pid1() -> None:
    tini = parse(TINI, children_readable=True)
    assert route(tini, SIGTERM) == "1" and route(tini, SIGUSR1) == "1"


@pytest.mark.parametrize(
    ("pid1", "signum", "where"),
    [
        (bare(SIGUSR1), SIGUSR1, "1"),  # handled by the main process itself
        (bare(SIGUSR1), SIGHUP, None),  # default handler at PID 1: the kernel drops it
        (bare(SIGTERM), SIGKILL, None),
        (bare(), SIGSTOP, None),
        (bare(), SIGCONT, None),
        (Pid1("sh", frozenset(), frozenset(), (9,)), SIGTERM, "-1"),  # a wrapper shell
        (Pid1("sh", frozenset(), frozenset(), (9,)), SIGSTOP, "-1"),
    ],
)
def test_route(pid1: Pid1, signum: int, where: str | None) -> None:
    assert route(pid1, signum) == where


def test_garbage_masks_read_as_empty() -> None:
    pid1 = parse("Name:\tx\nSigCgt:\tnot-hex\n", children_readable=False)
    assert pid1.caught == frozenset() and not pid1.supervises
