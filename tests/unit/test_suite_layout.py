"""Every Python module under tests/ has a basename of its own.

pytest imports test modules and their helpers by basename (rootdir-relative "prepend" mode,
which the helpers' plain `from allocations_fixture import ...` relies on), so two files of one
name in different folders stop the collection of the whole suite. Running one folder alone does
not show it; this check does, in the unit run (found when a fresh-clone `make test` stopped at
collection on two `test_plugin_tokens.py`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SHARED_NAMES = {"conftest.py", "__init__.py"}  # pytest loads these per folder, by path


def test_no_two_test_modules_share_a_basename() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name not in SHARED_NAMES:
            by_name[path.name].append(path.relative_to(TESTS).as_posix())
    shared = {name: sorted(paths) for name, paths in by_name.items() if len(paths) > 1}
    assert shared == {}
