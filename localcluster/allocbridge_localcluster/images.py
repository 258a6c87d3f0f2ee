"""Container images assembled offline from Debian packages, for the local cluster's real node.

This machine reaches no container registry, so the images the examples and tests name are
built here: each `ImageSpec` lists Debian packages (fetched with `apt-get download`, unpacked
with `dpkg-deb`), extra files, and the image config; `build_image` writes an OCI image-layout
tar (one uncompressed layer) that containerd imports under every name the spec gives. Builds are
cached by a digest of the spec and its packages, so a warm start only imports.

The stand-ins are not the upstream images: see docs/real-node.md for what each one holds.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_EPOCH = 0  # every file in a layer has this mtime, so a rebuild gives the same digest
_ROOT_FILES = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n"
    "nginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/home:/bin/false\n",
    "etc/group": "root:x:0:\nnginx:x:101:\nnogroup:x:65534:\n",
    "etc/hosts": "127.0.0.1 localhost\n",
}
_DIRS = ("tmp", "root", "proc", "sys", "dev", "etc", "var/tmp", "home")


@dataclass(frozen=True)
class ImageSpec:
    """One image: the names it answers to, its Debian packages, extra files and config."""

    names: tuple[str, ...]
    packages: tuple[str, ...]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    workdir: str = "/"
    files: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # path -> target
    busybox_applets: bool = True  # a link per applet, as the busybox image has
    exposed_ports: tuple[str, ...] = ()

    def digest(self, debs: list[Path]) -> str:
        """What a cached build is keyed by: this spec and the exact package files."""
        h = hashlib.sha256(json.dumps(self.__dict__, sort_keys=True, default=list).encode())
        for deb in sorted(debs):
            h.update(deb.name.encode())
        return h.hexdigest()[:16]


_STATIC_TINI = {"usr/bin/tini": "tini-static", "sbin/tini": "../usr/bin/tini-static"}
_NGINX_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>\n"
    "<body><h1>Welcome to nginx!</h1>\n<p>allocbridge's local stand-in: BusyBox httpd from "
    "Debian's busybox-static, serving /usr/share/nginx/html on port 8080.</p></body></html>\n"
)

# The sandbox ("pause") image: tini as PID 1 reaps orphans and ends on SIGTERM.
PAUSE = ImageSpec(
    names=("allocbridge.local/pause:3.10",),
    packages=("busybox-static", "tini"),
    entrypoint=("/usr/bin/tini-static", "-s", "--", "/bin/busybox", "sleep", "2147483647"),
    busybox_applets=False,
)
BUSYBOX = ImageSpec(
    names=(
        "docker.io/library/busybox:1.37",
        "docker.io/library/busybox:1.36",
        "docker.io/library/busybox:latest",
    ),
    packages=("busybox-static", "tini"),
    cmd=("sh",),
    links=_STATIC_TINI,
)
NGINX = ImageSpec(
    names=("docker.io/nginxinc/nginx-unprivileged:1.27-alpine",),
    packages=("busybox-static", "tini"),
    cmd=("/bin/busybox", "httpd", "-f", "-v", "-p", "8080", "-h", "/usr/share/nginx/html"),
    user="101",
    files={"usr/share/nginx/html/index.html": _NGINX_PAGE},
    links=_STATIC_TINI,
    exposed_ports=("8080/tcp",),
)
LOCAL_IMAGES = (PAUSE, BUSYBOX, NGINX)


class ImageBuildError(RuntimeError):
    """A package could not be fetched or unpacked; the message says which and why."""


def fetch_debs(packages: tuple[str, ...], cache: Path) -> list[Path]:
    """The packages' .deb files, downloaded into `cache` once (apt-get download)."""
    cache.mkdir(parents=True, exist_ok=True)
    found: list[Path] = []
    for package in packages:
        have = sorted(cache.glob(f"{package}_*.deb"))
        if not have:
            done = subprocess.run(
                ["apt-get", "download", package],
                cwd=cache,
                capture_output=True,
                text=True,
                check=False,
            )
            have = sorted(cache.glob(f"{package}_*.deb"))
            if done.returncode != 0 or not have:
                raise ImageBuildError(
                    f"apt-get download {package} failed ({done.stderr.strip()}); "
                    "run `apt-get update` first"
                )
        found.append(have[-1])
    return found


def build_image(spec: ImageSpec, cache: Path) -> Path:
    """The spec's OCI image-layout tar under `cache`, built unless a matching one exists."""
    debs = fetch_debs(spec.packages, cache / "debs")
    out = cache / f"{_file_name(spec.names[0])}-{spec.digest(debs)}.tar"
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(prefix="image-", dir=cache) as tmp:
        rootfs = Path(tmp) / "rootfs"
        rootfs.mkdir()
        for deb in debs:
            subprocess.run(["dpkg-deb", "-x", str(deb), str(rootfs)], check=True)
        shutil.rmtree(rootfs / "usr/share", ignore_errors=True)  # docs, man pages, hooks
        _complete_rootfs(spec, rootfs)
        layer = layer_tar(rootfs)
        _write_layout(spec, layer, out.with_suffix(".partial"))
        os.replace(out.with_suffix(".partial"), out)
    return out


def _file_name(name: str) -> str:
    return name.rsplit("/", 1)[-1].replace(":", "-")


def _complete_rootfs(spec: ImageSpec, rootfs: Path) -> None:
    for folder in _DIRS:
        (rootfs / folder).mkdir(parents=True, exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    for path, text in {**_ROOT_FILES, **spec.files}.items():
        target = rootfs / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    if spec.busybox_applets:
        listed = subprocess.run(
            [str(rootfs / "bin/busybox"), "--list-full"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        for applet in listed:
            link = rootfs / applet
            if not link.exists() and not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to("/bin/busybox")
    for path, target_name in spec.links.items():
        link = rootfs / path
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(target_name)


def layer_tar(rootfs: Path) -> bytes:
    """The root filesystem as a tar with fixed owners and times (a reproducible digest)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(rootfs.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = _EPOCH
            if info.isfile():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def _write_layout(spec: ImageSpec, layer: bytes, out: Path) -> None:
    image_config: dict[str, object] = {
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "Entrypoint": list(spec.entrypoint) or None,
        "Cmd": list(spec.cmd) or None,
        "User": spec.user,
        "WorkingDir": spec.workdir,
        "ExposedPorts": {port: {} for port in spec.exposed_ports} or None,
        "Labels": {"io.allocbridge.stand-in": "built from Debian packages"},
    }
    write_oci_layout(spec.names, image_config, layer, out)


def write_oci_layout(
    names: Sequence[str], image_config: Mapping[str, object], layer: bytes, out: Path
) -> None:
    """An OCI image layout (oci-layout, index.json, blobs) of one layer in one tar, as
    `ctr images import` reads it: `image_config` is the config's `config` (Env, Entrypoint,
    User, ...); each of `names` is an `io.containerd.image.name` annotation."""
    layer_digest, _ = _blob(layer)
    config: dict[str, object] = {
        "architecture": "amd64",
        "os": "linux",
        "config": dict(image_config),
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_digest, config_bytes = _blob(json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": len(layer),
            }
        ],
    }
    manifest_digest, manifest_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
            for name in names
        ],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True).encode(),
        f"blobs/sha256/{layer_digest[7:]}": layer,
        f"blobs/sha256/{config_digest[7:]}": config_bytes,
        f"blobs/sha256/{manifest_digest[7:]}": manifest_bytes,
    }
    with tarfile.open(out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), _EPOCH, 0o644
            tar.addfile(info, io.BytesIO(data))
