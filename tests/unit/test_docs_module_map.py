"""docs/architecture.md's module map names every module of the two packages, and only those:
a newcomer reads it to find where things are, so a module added or moved without its row
fails here rather than going unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "": ROOT / "operator" / "allocbridge",
    "allocbridge_localcluster/": ROOT / "localcluster" / "allocbridge_localcluster",
}


def mapped() -> set[str]:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc[doc.index("## Module map") :]
    return set(re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE))


def modules() -> set[str]:
    """Each module as `pkg/name.py`, each subpackage as `pkg/` (its `__init__`)."""
    found = set()
    for prefix, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).as_posix()
            key = prefix + (rel.removesuffix("__init__.py") if path.name == "__init__.py" else rel)
            if key:  # the product package's own __init__ has no row
                found.add(key)
    return found


def test_every_module_has_a_row() -> None:
    assert sorted(modules() - mapped()) == []


def test_every_row_names_a_module() -> None:
    assert sorted(mapped() - modules()) == []
