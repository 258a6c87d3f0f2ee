"""`make image` without Docker: allocbridge's own container image, assembled on this machine.

The Dockerfile needs Docker and a registry; this builder needs neither (apt-get's mirror and
PyPI are enough), so `make e2e` can deploy the image users deploy on the local cluster's real
node. It mirrors the Dockerfile's final stage:

* the base is Debian's python3.11 and the runtime libraries it needs, unpacked from Debian
  packages (`debian_packages` follows their Depends and Pre-Depends, first alternative, as
  apt-get would), plus busybox for the `/bin/sh`, `od`, `sed` and `grep` that the
  Deployment's init container runs;
* a virtual environment in `/opt/allocbridge` holds the project's wheel and the dependencies
  pinned in `operator/requirements.txt`, installed by pip with wheels only (no compiler);
* the project's wheel is built from a copy of the sources without `allocbridge_localcluster`
  (the test control plane), so the image cannot import it; byte code is compiled here with
  unchecked hashes, since the root filesystem is read-only at run time and the layer's files
  all carry one fixed mtime;
* it runs as uid/gid 10001 and starts `allocbridge run` on the mounted config.

The output is an OCI image-layout tar (`images.py` writes the layer) under `.cache/images/`,
named `docker.io/library/allocbridge:dev` by default; it is rebuilt only when the sources,
the pins or the packages change. docs/development.md says how `make e2e` uses it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .images import ImageBuildError, fetch_debs, layer_tar, write_oci_layout

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "operator" / "requirements.txt"
DEFAULT_NAME = "allocbridge:dev"
VENV = "opt/allocbridge"
PYTHON = "python3.11"
# What the interpreter needs; `debian_packages` adds their dependencies.
ROOT_PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib", "busybox-static")
# Reached only through a first alternative of readline-common (to register its info page);
# the image never runs a package manager.
EXCLUDED_PACKAGES = frozenset({"dpkg", "install-info"})
UID = 10001
BUSYBOX_APPLETS = (
    *("sh", "od", "tr", "date", "sed", "grep"),  # the init container's script
    *("cat", "ls", "env", "id", "ps", "sleep"),  # a look around with kubectl exec
)
_EPOCH = 0
# Wheels for Debian 12's CPython 3.11 on amd64: any manylinux up to its glibc 2.36.
_PLATFORMS = tuple(
    option
    for tag in (
        *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)),
        "manylinux2014_x86_64",
        "manylinux2010_x86_64",
        "manylinux1_x86_64",
    )
    for option in ("--platform", tag)
)
_TARGET = (
    *_PLATFORMS,
    "--implementation",
    "cp",
    "--python-version",
    "3.11",
    "--abi",
    "cp311",
    "--only-binary=:all:",
)


def normalize(name: str) -> str:
    """A reference as containerd stores it (`allocbridge:dev` -> docker.io/library/...)."""
    first, _, rest = name.partition("/")
    if not rest:
        return f"docker.io/library/{name}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{name}"
    return name


def debian_packages(roots: tuple[str, ...] = ROOT_PACKAGES) -> list[str]:
    """`roots` and everything they Depend or Pre-Depend on (first alternative; a virtual
    package by its first provider), as `apt-cache depends` lists them."""
    found: set[str] = set()
    todo = list(roots)
    while todo:  # one apt-cache call per level of the dependency tree
        level = sorted({p for p in todo if p not in found and p not in EXCLUDED_PACKAGES})
        found.update(level)
        if not level:
            break
        listed = subprocess.run(
            [
                "apt-cache",
                "depends",
                "--no-recommends",
                "--no-suggests",
                "--no-conflicts",
                "--no-breaks",
                "--no-replaces",
                "--no-enhances",
                *level,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if listed.returncode != 0:
            raise ImageBuildError(f"apt-cache depends {level}: {listed.stderr.strip()}")
        todo = _first_alternatives(listed.stdout)
    return sorted(found)


def _first_alternatives(listing: str) -> list[str]:
    """The packages an `apt-cache depends` listing needs: of `|Depends: a` / `Depends: b`
    (a or b) only `a`; of a virtual `<x>` the provider indented below it. A line without
    indentation starts the next package's list."""
    wanted: list[str] = []
    in_alternatives = False
    virtual = False
    for line in listing.splitlines():
        if not line.startswith(" "):
            in_alternatives = virtual = False
            continue
        match = re.match(r"^ ([ |])(Pre)?Depends: (\S+)", line)
        if match:
            bar, _, name = match.groups()
            virtual = False
            if not in_alternatives:
                if name.startswith("<"):
                    virtual = True
                else:
                    wanted.append(name.split(":")[0])
            in_alternatives = bar == "|"
        elif virtual and line.startswith("    "):
            wanted.append(line.strip().split(":")[0])
            virtual = False
    return wanted


def pin_requirements(out: Path = REQUIREMENTS) -> Path:
    """Write the runtime dependency closure of the installed `allocbridge`, pinned to the
    versions installed here (the dev venv that the tests ran with)."""
    from importlib import metadata  # noqa: PLC0415 - only `--pin` needs it

    from packaging.requirements import Requirement  # noqa: PLC0415

    pins: dict[str, str] = {}
    todo = [Requirement(r) for r in metadata.requires("allocbridge") or []]
    while todo:
        requirement = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        if name in pins:
            continue
        distribution = metadata.distribution(requirement.name)
        pins[name] = distribution.version
        todo.extend(Requirement(r) for r in distribution.requires or [])
    header = (
        "# The image's runtime dependencies, pinned (the Dockerfile and `make image` install\n"
        "# exactly these, wheels only). Regenerate from a dev venv after changing pyproject:\n"
        "#   .venv/bin/python -m allocbridge_localcluster.operator_image --pin\n"
    )
    out.write_text(header + "".join(f"{k}=={v}\n" for k, v in sorted(pins.items())))
    return out


def build(cache: Path, name: str = DEFAULT_NAME) -> Path:
    """The image's OCI layout tar under `cache` (`<name>.tar`), rebuilt only when its inputs
    changed; returns its path."""
    reference = normalize(name)
    cache.mkdir(parents=True, exist_ok=True)
    packages = debian_packages()
    debs = fetch_debs(tuple(packages), cache / "debs")
    key = _inputs_digest(reference, debs)
    out = cache / f"{reference.rsplit('/', 1)[-1].replace(':', '-')}.tar"
    stamp = out.with_suffix(".inputs")
    if out.exists() and stamp.exists() and stamp.read_text() == key:
        return out
    with tempfile.TemporaryDirectory(prefix="operator-image-", dir=cache) as tmp:
        rootfs = Path(tmp) / "rootfs"
        rootfs.mkdir()
        for deb in debs:
            subprocess.run(["dpkg-deb", "-x", str(deb), str(rootfs)], check=True)
        for unused in ("usr/share", "usr/lib/python3.11/test", "usr/lib/python3.11/idlelib"):
            shutil.rmtree(rootfs / unused, ignore_errors=True)
        _busybox_applets(rootfs)
        _install_python_packages(rootfs, Path(tmp))
        _complete_rootfs(rootfs)
        _compile(rootfs)
        _write_layout(reference, layer_tar(rootfs), out.with_suffix(".partial"))
        os.replace(out.with_suffix(".partial"), out)
    stamp.write_text(key)
    return out


def _inputs_digest(reference: str, debs: list[Path]) -> str:
    h = hashlib.sha256(reference.encode())
    h.update(Path(__file__).read_bytes())
    h.update(REQUIREMENTS.read_bytes())
    h.update((REPO / "pyproject.toml").read_bytes())
    for deb in sorted(debs):
        h.update(deb.name.encode())
    for source in sorted((REPO / "operator" / "allocbridge").rglob("*")):
        if source.is_file() and "__pycache__" not in source.parts:
            h.update(str(source.relative_to(REPO)).encode())
            h.update(source.read_bytes())
    return h.hexdigest()


def _busybox_applets(rootfs: Path) -> None:
    """The few commands the init container and an operator's `kubectl exec` use, as links
    to busybox (not all of its applets: they include ar and dpkg)."""
    for applet in BUSYBOX_APPLETS:
        link = rootfs / "bin" / applet
        if not link.exists() and not link.is_symlink():
            link.symlink_to("busybox")


def _install_python_packages(rootfs: Path, tmp: Path) -> None:
    """The venv: the pinned wheels and the project's own wheel."""
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(
        REPO / "operator" / "allocbridge",
        source / "operator" / "allocbridge",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    wheels = tmp / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run([*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(source)])
    (project_wheel,) = wheels.glob("allocbridge-*.whl")
    venv = rootfs / VENV
    site = venv / "lib" / PYTHON / "site-packages"
    _run(
        [
            *pip,
            "install",
            "--quiet",
            "--no-compile",
            "--no-deps",
            *_TARGET,
            "--target",
            str(site),
            "--requirement",
            str(REQUIREMENTS),
            str(project_wheel),
        ]
    )
    shutil.rmtree(site / "bin", ignore_errors=True)  # scripts with this machine's interpreter
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(f"/usr/bin/{PYTHON}")
    (venv / "bin" / "python3").symlink_to("python")
    (venv / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11\n"
        f"executable = /usr/bin/{PYTHON}\n"
    )
    script = venv / "bin" / "allocbridge"
    script.write_text(
        f"#!/{VENV}/bin/python\nimport sys\n\nfrom allocbridge.cli import main\n\n"
        "if __name__ == '__main__':\n    sys.exit(main())\n"
    )
    script.chmod(0o755)


def _complete_rootfs(rootfs: Path) -> None:
    for folder in ("tmp", "proc", "sys", "dev", "etc", "var/tmp", "etc/allocbridge"):
        (rootfs / folder).mkdir(parents=True, exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    (rootfs / "var/tmp").chmod(0o1777)
    files = {
        "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n"
        f"allocbridge:x:{UID}:{UID}:allocbridge:/nonexistent:/usr/sbin/nologin\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "etc/group": f"root:x:0:\nallocbridge:x:{UID}:\nnogroup:x:65534:\n",
        "etc/hosts": "127.0.0.1 localhost\n",
    }
    for path, text in files.items():
        (rootfs / path).write_text(text)


def _compile(rootfs: Path) -> None:
    """Byte code for the standard library and the venv, valid whatever the files' mtimes."""
    targets = [rootfs / "usr/lib" / PYTHON, rootfs / VENV / "lib"]
    _run(
        [
            sys.executable,
            "-m",
            "compileall",
            "-q",
            "-j0",
            "--invalidation-mode",
            "unchecked-hash",
            "-s",
            str(rootfs),
            "-p",
            "/",
            *map(str, targets),
        ],
        allow_failure=True,  # a few test fixtures in packages are not valid Python 3.11
    )


def _run(argv: list[str], *, allow_failure: bool = False) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0 and not allow_failure:
        raise ImageBuildError(f"{' '.join(argv[:6])} ... failed:\n{done.stderr[-3000:]}")


def _write_layout(reference: str, layer: bytes, out: Path) -> None:
    """An OCI image layout in one tar, with the Dockerfile final stage's config."""
    image_config: dict[str, object] = {
        "Env": [
            f"PATH=/{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "PYTHONDONTWRITEBYTECODE=1",
            "PYTHONUNBUFFERED=1",
        ],
        "Entrypoint": ["allocbridge", "run", "--config", "/etc/allocbridge/allocbridge.hcl"],
        "User": f"{UID}:{UID}",
        "WorkingDir": "/",
        "ExposedPorts": {"4646/tcp": {}, "9203/tcp": {}},
        "Labels": {
            "org.opencontainers.image.title": "allocbridge",
            "org.opencontainers.image.description": (
                "Nomad's allocations API over Kubernetes Allocation resources"
            ),
            "io.allocbridge.base": "Debian packages (make image)",
        },
    }
    write_oci_layout([reference], image_config, layer, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default=DEFAULT_NAME, help="the image reference")
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "images")
    parser.add_argument("--pin", action="store_true", help="write operator/requirements.txt")
    args = parser.parse_args(argv)
    if args.pin:
        print(pin_requirements())
        return 0
    try:
        out = build(args.cache, args.name)
    except ImageBuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{normalize(args.name)}: {out} ({out.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
