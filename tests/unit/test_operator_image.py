"""`make image`'s pure parts: which Debian packages an `apt-cache depends` listing asks for,
and how an image name is stored (the build itself runs in `make e2e`)."""

from __future__ import annotations

from allocbridge_localcluster.operator_image import _first_alternatives, normalize

LISTING = """\
libpython3.11-stdlib
  Depends: libpython3.11-minimal
 |Depends: media-types
  Depends: mime-support
  Depends: libc6
readline-common
 |Depends: dpkg
  Depends: install-info
tar
  PreDepends: libacl1
  Depends: <awk>
    mawk
    gawk
  Depends: libc6
"""


def test_the_first_of_each_alternative_and_the_first_provider_of_a_virtual_package() -> None:
    assert _first_alternatives(LISTING) == [
        "libpython3.11-minimal",
        "media-types",
        "libc6",
        "dpkg",
        "libacl1",
        "mawk",
        "libc6",
    ]


def test_names_are_stored_as_containerd_stores_them() -> None:
    assert normalize("allocbridge:dev") == "docker.io/library/allocbridge:dev"
    assert normalize("team/allocbridge:1") == "docker.io/team/allocbridge:1"
    assert normalize("registry.example.com/allocbridge:1") == "registry.example.com/allocbridge:1"
    assert normalize("localhost/allocbridge:1") == "localhost/allocbridge:1"
