"""The Dockerfile's promises, checked by reading it (no Docker here to build it; `make image`
builds the same image without Docker, and `make e2e` deploys that one).

Multi-stage: the virtual environment is built in one stage and copied into a slim final stage
that has no compilers or package managers' leftovers, runs as a numeric non-root user (so
Kubernetes' runAsNonRoot can verify it) and starts `allocbridge run` on the mounted config.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPILERS = ("gcc", "g++", "clang", "build-essential", "make", "python3-dev", "libc6-dev")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def values(self, keyword: str) -> list[str]:
        return [value for key, value in self.instructions if key == keyword]


def stages() -> list[Stage]:
    """The Dockerfile's stages, with continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    joined = re.sub(r"\\\n", " ", text)
    found: list[Stage] = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, value = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = value.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            found.append(Stage(parts[0], name))
        elif found:
            found[-1].instructions.append((keyword, value.strip()))
    return found


def test_the_build_has_a_builder_stage_and_a_final_stage_on_slim_python_311() -> None:
    builder, final = stages()[0], stages()[-1]
    assert len(stages()) >= 2
    assert builder.name and final.name is None
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"python:3\.11-slim", text)
    assert builder.base == final.base  # the venv's interpreter path must exist in both
    assert any("venv" in run for run in builder.values("RUN"))
    assert any(re.search(r"pip install .*\.", run) for run in builder.values("RUN"))


def test_the_final_stage_copies_the_venv_and_nothing_to_build_with() -> None:
    builder, final = stages()[0], stages()[-1]
    copies = final.values("COPY")
    assert any(c.startswith(f"--from={builder.name} ") for c in copies), copies
    assert not [c for c in copies if not c.startswith("--from=")], "sources copied into final"
    for run in final.values("RUN"):
        assert "pip" not in run and "apt-get" not in run and "apk" not in run, run
        for compiler in COMPILERS:
            assert not re.search(rf"(^|\s){re.escape(compiler)}(\s|$)", run), run


def test_the_final_stage_runs_as_a_numeric_non_root_user() -> None:
    (user,) = stages()[-1].values("USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, user


def test_the_entrypoint_runs_the_operator_on_the_mounted_config() -> None:
    (entrypoint,) = stages()[-1].values("ENTRYPOINT")
    assert json.loads(entrypoint) == [
        "allocbridge",
        "run",
        "--config",
        "/etc/allocbridge/allocbridge.hcl",
    ]


def test_the_image_installs_the_pinned_wheels_without_the_test_control_plane() -> None:
    """The same promises as `make image` (operator_image.py): exact pins, wheels only, and
    no allocbridge_localcluster to import."""
    copied = [c.split()[0] for c in stages()[0].values("COPY")]
    assert not [c for c in copied if c.startswith("localcluster")], copied
    (run,) = [r for r in stages()[0].values("RUN") if "pip install" in r]
    assert re.search(
        r"pip install --only-binary=:all: --no-deps -r operator/requirements\.txt", run
    )
    pins = [
        line
        for line in (ROOT / "operator" / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert pins and all(re.fullmatch(r"[a-z0-9-]+==[\w.]+", pin) for pin in pins), pins
    names = {pin.split("==")[0] for pin in pins}
    assert {"kopf", "aiohttp", "kubernetes-asyncio", "pydantic"} <= names
    assert not names & {"pytest", "mypy", "ruff", "schemathesis", "python-nomad"}


def test_the_build_context_is_only_the_package() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"  # everything out (.venv, .git, .cache, .dev, tests) ...
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "operator"}  # ... but what pip needs
    copied = " ".join(stages()[0].values("COPY"))
    for name in allowed:
        assert name in copied
