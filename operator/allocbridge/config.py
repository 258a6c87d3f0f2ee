"""The HCL configuration file, Boundary style, validated once at start into typed settings.

A file holds a `controller` block, `listener "tcp"` stanzas with `purpose = "api"` or `"ops"`,
and blocks of our own (`kubernetes`, `acl`, `log`). Every mistake is collected (not only the
first) and reported with the file, the stanza, the field and what is allowed, so one run of
`allocbridge check-config` shows everything to fix.

Defaults have one home each: the settings dataclasses below (and `PodSettings` in
`allocbridge.model.pods` for how pods are rendered, which the `kubernetes` block sets). The
validator and `render` read them from there, never as literals of their own.

The parser marks blocks (`explicit_blocks`), so `controller = { ... }` (an attribute) is told
apart from `controller { ... }` and every value is type-checked before it is used: a mistake
in the file's shape is a problem in the list, never a traceback.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import hcl2
from hcl2.utils import SerializationOptions
from lark.exceptions import UnexpectedInput

from allocbridge.model.durations import DurationError, format_go_duration, parse_duration_second
from allocbridge.model.pods import PodSettings

Purpose = Literal["api", "ops"]
T = TypeVar("T")
DEFAULT_PORTS: dict[str, int] = {"api": 4646, "ops": 9203}
DEFAULT_HOST = "127.0.0.1"
TLS_VERSIONS = ("tls12", "tls13")
_BOUNDARY_ONLY_PURPOSES = ("cluster", "proxy")
_BLOCK_MARK = "__is_block__"  # python-hcl2's key on every block body (explicit_blocks=True)
_DURATION_FORMS = 'a Go duration like "10s" or "1m30s", a whole number of seconds, or "Nd" days'


@dataclass(frozen=True)
class ControllerSettings:
    """The `controller` block; its presence (with both listeners) enables `/health`."""

    name: str = "allocbridge"
    graceful_shutdown_wait: float | None = None  # seconds; None means no 503 phase


@dataclass(frozen=True)
class ListenerSettings:
    """One `listener "tcp"` stanza."""

    purpose: Purpose
    host: str  # "" listens on every interface
    port: int
    tls_disable: bool = False
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_min_version: str = TLS_VERSIONS[0]

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class KubernetesSettings:
    """How the operator reaches Kubernetes and what it watches."""

    kubeconfig: str | None = None  # None: in-cluster, else $KUBECONFIG or ~/.kube/config
    context: str | None = None
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    peering: str = "allocbridge"
    priority: int = 0
    standalone: bool = False  # no peering: this replica reconciles whatever others do
    #: How Allocations become pods: the fields of this block that PodSettings owns.
    pods: PodSettings = field(default_factory=PodSettings)


@dataclass(frozen=True)
class AclSettings:
    """`acl { enabled, audiences }`: when disabled every request is allowed (the dev default).

    `audiences`: the token audiences accepted; empty means the API server's own audience, so
    ordinary ServiceAccount tokens work. Set it to accept only tokens minted for allocbridge
    (`kubectl create token SA --audience allocbridge`).
    """

    enabled: bool = True
    audiences: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogSettings:
    """`log { format = "text"|"json", level = ... }`."""

    format: Literal["text", "json"] = "text"
    level: str = "info"


@dataclass(frozen=True)
class Settings:
    """The whole validated configuration."""

    source: str
    controller: ControllerSettings | None
    listeners: tuple[ListenerSettings, ...]
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    acl: AclSettings = field(default_factory=AclSettings)
    log: LogSettings = field(default_factory=LogSettings)

    def listener(self, purpose: Purpose) -> ListenerSettings | None:
        return next((item for item in self.listeners if item.purpose == purpose), None)

    @property
    def health_enabled(self) -> bool:
        """Boundary's rule: `/health` exists only with a controller, an api and an ops listener."""
        return (
            self.controller is not None
            and self.listener("api") is not None
            and self.listener("ops") is not None
        )


class ConfigError(Exception):
    """Every problem found in one configuration file."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {problem}" for problem in problems))


def load_file(path: str | Path) -> Settings:
    """Read and validate a configuration file; raises ConfigError listing every problem."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, [f"cannot read the file: {exc.strerror}"]) from exc
    return load_text(text, source=source, base_dir=Path(path).resolve().parent)


def load_text(text: str, *, source: str = "<config>", base_dir: Path | None = None) -> Settings:
    """Parse and validate HCL text; relative TLS file paths resolve against base_dir."""
    options = SerializationOptions(
        strip_string_quotes=True, explicit_blocks=True, with_comments=False
    )
    try:
        raw = hcl2.loads(text, serialization_options=options)
    except UnexpectedInput as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else "syntax error"
        raise ConfigError(
            source, [f"line {exc.line}, column {exc.column}: invalid HCL: {first_line}"]
        ) from exc
    except Exception as exc:  # python-hcl2 raises a few other kinds for odd input
        raise ConfigError(source, [f"invalid HCL: {exc}"]) from exc
    return _Validator(source, base_dir or Path.cwd()).settings(raw)


class _Validator:
    """Walks the parsed HCL once, collecting problems instead of stopping at the first."""

    def __init__(self, source: str, base_dir: Path) -> None:
        self.source = source
        self.base_dir = base_dir
        self.problems: list[str] = []

    def problem(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def settings(self, raw: Mapping[str, Any]) -> Settings:
        known = {"controller", "listener", "kubernetes", "acl", "log"}
        for name in raw:
            if name not in known:
                self.problem(
                    f"block {name!r}", f"unknown block; allowed: {', '.join(sorted(known))}"
                )
        controller = self.single(raw, "controller", self.controller, None)
        listeners = self.listeners(self.blocks(raw, "listener"))
        kubernetes = self.single(raw, "kubernetes", self.kubernetes, KubernetesSettings())
        acl = self.single(raw, "acl", self.acl, AclSettings())
        log = self.single(raw, "log", self.log, LogSettings())
        if self.problems:
            raise ConfigError(self.source, self.problems)
        return Settings(self.source, controller, tuple(listeners), kubernetes, acl, log)

    def blocks(
        self, raw: Mapping[str, Any], name: str
    ) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
        """The (labels, body) of every `name` block; `name = ...` is reported, not guessed at."""
        if name not in raw:
            return []
        value = raw[name]
        found = [_unwrap(item) for item in value] if isinstance(value, list) else []
        if not found or any(item is None for item in found):
            shape = f'{name} "tcp"' if name == "listener" else name
            self.problem(
                name, f"must be a block ({shape} {{ ... }}), not an attribute ({name} = ...)"
            )
            return []
        return [item for item in found if item is not None]

    def single(
        self, raw: Mapping[str, Any], name: str, parse: Callable[[Mapping[str, Any]], T], default: T
    ) -> T:
        blocks = self.blocks(raw, name)
        if not blocks:
            return default
        if len(blocks) > 1:
            self.problem(f"{name} block", "may appear only once")
        labels, block = blocks[0]
        if labels:
            got = " ".join(f'"{label}"' for label in labels)
            self.problem(f"{name} block", f"takes no label, got {got}; write {name} {{ ... }}")
        return parse(block)

    def fields(self, where: str, block: Mapping[str, Any], allowed: set[str]) -> dict[str, Any]:
        """The block's known attributes; unknown names and nested blocks are reported."""
        known: dict[str, Any] = {}
        for key, value in block.items():
            if key not in allowed:
                self.problem(
                    f"{where}: {key}", f"unknown field; allowed: {', '.join(sorted(allowed))}"
                )
            elif _is_nested_block(value):
                self.problem(f"{where}: {key}", f"must be an attribute ({key} = ...), not a block")
            else:
                known[key] = value
        return known

    def string(self, where: str, block: Mapping[str, Any], key: str) -> str | None:
        value = block.get(key)
        if value is None or isinstance(value, str):
            return value
        self.problem(f"{where}: {key}", f"must be a string, got {value!r}")
        return None

    def boolean(self, where: str, block: Mapping[str, Any], key: str, default: bool) -> bool:
        value = block.get(key, default)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        self.problem(f"{where}: {key}", f"must be true or false, got {value!r}")
        return default

    def integer(self, where: str, block: Mapping[str, Any], key: str, default: int) -> int:
        value = block.get(key, default)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        self.problem(f"{where}: {key}", f"must be a whole number, got {value!r}")
        return default

    def controller(self, block: Mapping[str, Any]) -> ControllerSettings:
        where = "controller block"
        block = self.fields(
            where, block, {"name", "description", "graceful_shutdown_wait_duration"}
        )
        name = self.string(where, block, "name") or ControllerSettings.name
        wait: float | None = None
        raw_wait = block.get("graceful_shutdown_wait_duration")
        if raw_wait is not None:
            try:
                # model/durations reads strings and numbers only: anything else is refused here
                if isinstance(raw_wait, bool) or not isinstance(raw_wait, str | int | float):
                    raise DurationError("not a string or a number")
                wait = parse_duration_second(raw_wait)
                if wait < 0:
                    raise DurationError("negative")
            except DurationError:
                self.problem(
                    f"{where}: graceful_shutdown_wait_duration",
                    f"{raw_wait!r} is not a duration; allowed: {_DURATION_FORMS}",
                )
        return ControllerSettings(name=name, graceful_shutdown_wait=wait)

    def listeners(
        self, blocks: list[tuple[tuple[str, ...], dict[str, Any]]]
    ) -> list[ListenerSettings]:
        out: list[ListenerSettings] = []
        seen: dict[str, int] = {}
        for index, (labels, block) in enumerate(blocks, start=1):
            if len(labels) != 1:
                got = "; got " + " ".join(f'"{label}"' for label in labels) if labels else ""
                self.problem(
                    f"listener #{index}",
                    f'needs its type as the one label: listener "tcp" {{ ... }}{got}',
                )
                continue
            kind = labels[0]
            where = f'listener "{kind}" #{index}'
            if kind != "tcp":
                self.problem(where, f'unsupported listener type "{kind}"; allowed: "tcp"')
                continue
            listener = self.listener(where, block)
            if listener is None:
                continue
            if listener.purpose in seen:
                self.problem(
                    f"{where}: purpose",
                    f'a listener with purpose "{listener.purpose}" is already defined '
                    f"(#{seen[listener.purpose]}); allowed: one api and one ops listener",
                )
                continue
            seen[listener.purpose] = index
            out.append(listener)
        return out

    def listener(self, where: str, block: Mapping[str, Any]) -> ListenerSettings | None:
        purpose = block.get("purpose")
        if isinstance(purpose, str) and purpose in DEFAULT_PORTS:
            where = f'{where} (purpose "{purpose}")'
        block = self.fields(
            where,
            block,
            {
                "purpose",
                "address",
                "tls_disable",
                "tls_cert_file",
                "tls_key_file",
                "tls_min_version",
            },
        )
        purpose = block.get("purpose")  # again: a nested `purpose { }` block is gone now
        if isinstance(purpose, list):
            if len(purpose) != 1:
                self.problem(
                    f"{where}: purpose",
                    'exactly one purpose per listener is supported; allowed: "api", "ops"',
                )
                return None
            purpose = purpose[0]
        if purpose is None:
            self.problem(f"{where}: purpose", 'is required; allowed: "api", "ops"')
            return None
        if not isinstance(purpose, str):
            self.problem(f"{where}: purpose", f'must be "api" or "ops", got {purpose!r}')
            return None
        if purpose in _BOUNDARY_ONLY_PURPOSES:
            self.problem(
                f"{where}: purpose",
                f'"{purpose}" is not supported by allocbridge; allowed: "api", "ops"',
            )
            return None
        if purpose not in DEFAULT_PORTS:
            self.problem(f"{where}: purpose", f'unknown purpose {purpose!r}; allowed: "api", "ops"')
            return None
        checked: Purpose = "api" if purpose == "api" else "ops"
        host, port = self.address(where, block.get("address"), DEFAULT_PORTS[purpose])
        tls_disable = self.boolean(where, block, "tls_disable", ListenerSettings.tls_disable)
        cert = self.string(where, block, "tls_cert_file")
        key = self.string(where, block, "tls_key_file")
        min_version = (
            self.string(where, block, "tls_min_version") or ListenerSettings.tls_min_version
        )
        if min_version not in TLS_VERSIONS:
            self.problem(
                f"{where}: tls_min_version",
                f"unsupported minimum TLS version {min_version!r}; allowed: tls12, tls13",
            )
        if not tls_disable:
            cert = self.tls_file(where, "tls_cert_file", cert)
            key = self.tls_file(where, "tls_key_file", key)
        return ListenerSettings(
            purpose=checked,
            host=host,
            port=port,
            tls_disable=tls_disable,
            tls_cert_file=cert,
            tls_key_file=key,
            tls_min_version=min_version,
        )

    def tls_file(self, where: str, key: str, value: str | None) -> str | None:
        if not value:
            self.problem(
                f"{where}: {key}",
                "is required unless tls_disable = true (TLS is on by default)",
            )
            return None
        path = Path(value)
        if not path.is_absolute():
            path = self.base_dir / path
        if not path.is_file():
            self.problem(f"{where}: {key}", f"file not found: {path}")
        return str(path)

    def address(self, where: str, value: Any, default_port: int) -> tuple[str, int]:
        """(host, port) as Boundary's listener reads them: unset is `127.0.0.1` on the
        purpose's port, a host alone gets that port, and `:port` (an empty host) listens on
        every interface, as Go's `net.Listen` does with it."""
        if value is None or value == "":
            return DEFAULT_HOST, default_port
        if not isinstance(value, str):
            self.problem(f"{where}: address", f"must be a string like host:port, got {value!r}")
            return DEFAULT_HOST, default_port
        host, port_text = value, ""
        if value.startswith("["):
            end = value.find("]")
            host, rest = value[1:end], value[end + 1 :]
            if end < 0 or (rest and not rest.startswith(":")):
                self.problem(f"{where}: address", f"{value!r} is not host:port")
                return DEFAULT_HOST, default_port
            port_text = rest[1:]
        elif value.count(":") == 1:
            host, port_text = value.split(":")
        elif value.count(":") > 1:
            host = value  # a bare IPv6 address
        if host != "" and not _is_host(host):
            self.problem(f"{where}: address", f"{host!r} is not an IP address or host name")
        if not port_text:
            return host or DEFAULT_HOST, default_port
        if not port_text.isdigit() or int(port_text) > 65535:
            self.problem(f"{where}: address", f"port {port_text!r} is not a number from 0 to 65535")
            return host or DEFAULT_HOST, default_port
        return host, int(port_text)

    def kubernetes(self, block: Mapping[str, Any]) -> KubernetesSettings:
        where = "kubernetes block"
        block = self.fields(where, block, {*_KUBERNETES_FIELDS, *_POD_FIELDS})
        namespaces = block.get("namespaces", [])
        if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
            self.problem(f"{where}: namespaces", "must be a list of namespace names")
            namespaces = []
        defaults = KubernetesSettings()
        return KubernetesSettings(
            kubeconfig=self.string(where, block, "kubeconfig"),
            context=self.string(where, block, "context"),
            namespaces=tuple(namespaces),
            peering=self.string(where, block, "peering") or defaults.peering,
            priority=self.integer(where, block, "priority", defaults.priority),
            standalone=self.boolean(where, block, "standalone", defaults.standalone),
            pods=self.pods(where, block),
        )

    def pods(self, where: str, block: Mapping[str, Any]) -> PodSettings:
        """The `kubernetes` block's pod fields, checked one by one (PodSettings would stop at
        the first mistake); what is not set keeps PodSettings' default."""
        defaults = PodSettings()
        mhz = self.integer(where, block, "mhz_per_cpu", defaults.mhz_per_cpu)
        if mhz <= 0:
            self.problem(f"{where}: mhz_per_cpu", "must be greater than 0")
            mhz = defaults.mhz_per_cpu
        memory_factor = self.factor(where, block, "memory_limit_factor")
        cpu_factor = self.factor(where, block, "cpu_limit_factor")
        pull = self.string(where, block, "image_pull_policy")
        if pull is not None and pull not in _PULL_POLICIES:
            self.problem(
                f"{where}: image_pull_policy",
                f"unknown policy {pull!r}; allowed: {', '.join(_PULL_POLICIES)}",
            )
            pull = defaults.image_pull_policy
        return PodSettings(
            mhz_per_cpu=mhz,
            cpu_limit_factor=cpu_factor,
            memory_limit_factor=defaults.memory_limit_factor
            if memory_factor is None
            else memory_factor,
            exec_image=self.string(where, block, "exec_image") or defaults.exec_image,
            image_pull_policy=pull or defaults.image_pull_policy,
            extra_labels=self.string_map(where, block, "pod_labels"),
            extra_annotations=self.string_map(where, block, "pod_annotations"),
            tolerations=self.tolerations(where, block),
            node_selector=self.string_map(where, block, "node_selector"),
            service_account_name=self.string(where, block, "service_account_name")
            or defaults.service_account_name,
            automount_service_account_token=self.boolean(
                where,
                block,
                "automount_service_account_token",
                defaults.automount_service_account_token,
            ),
            reserved_ports_as_host_ports=self.boolean(
                where, block, "reserved_ports_as_host_ports", defaults.reserved_ports_as_host_ports
            ),
            task_dirs=self.boolean(where, block, "task_dirs", defaults.task_dirs),
        )

    def factor(self, where: str, block: Mapping[str, Any], key: str) -> float | None:
        """A limit factor: a number of at least 1 (the limit is never below the request)."""
        value = block.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problem(f"{where}: {key}", f"must be a number, got {value!r}")
            return None
        if value < 1:
            self.problem(
                f"{where}: {key}", "must be at least 1 (a limit is never below its request)"
            )
            return None
        return float(value)

    def string_map(self, where: str, block: Mapping[str, Any], key: str) -> dict[str, str]:
        value = block.get(key, {})
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            self.problem(f"{where}: {key}", 'must be a map of strings, like { team = "a" }')
            return {}
        return dict(value)

    def tolerations(self, where: str, block: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
        """Pod tolerations as Kubernetes spells them (`key`, `operator`, `value`, `effect`,
        `tolerationSeconds`); the API server checks the rest when a pod is created."""
        value = block.get("tolerations", [])
        if not isinstance(value, list):
            self.problem(f"{where}: tolerations", "must be a list of toleration objects")
            return ()
        out: list[dict[str, Any]] = []
        for index, item in enumerate(value, start=1):
            at = f"{where}: tolerations #{index}"
            if not isinstance(item, dict) or not item:
                self.problem(at, 'must be an object like { key = "gpu", operator = "Exists" }')
                continue
            unknown = sorted(set(item) - set(_TOLERATION_FIELDS))
            if unknown:
                allowed = ", ".join(_TOLERATION_FIELDS)
                self.problem(at, f"unknown field {unknown[0]!r}; allowed: {allowed}")
                continue
            seconds = item.get("tolerationSeconds")
            strings = {k: v for k, v in item.items() if k != "tolerationSeconds"}
            if not all(isinstance(v, str) for v in strings.values()):
                self.problem(at, "key, operator, value and effect must be strings")
            elif seconds is not None and (
                isinstance(seconds, bool) or not isinstance(seconds, int)
            ):
                self.problem(at, f"tolerationSeconds must be a whole number, got {seconds!r}")
            else:
                out.append(dict(item))
        return tuple(out)

    def acl(self, block: Mapping[str, Any]) -> AclSettings:
        where = "acl block"
        block = self.fields(where, block, {"enabled", "audiences"})
        audiences = block.get("audiences", [])
        if not isinstance(audiences, list) or not all(
            isinstance(a, str) and a.strip() for a in audiences
        ):
            self.problem(f"{where}: audiences", "must be a list of non-empty audience names")
            audiences = []
        return AclSettings(
            enabled=self.boolean(where, block, "enabled", AclSettings.enabled),
            audiences=tuple(audiences),
        )

    def log(self, block: Mapping[str, Any]) -> LogSettings:
        where = "log block"
        block = self.fields(where, block, {"format", "level"})
        fmt = self.string(where, block, "format") or LogSettings.format
        if fmt not in ("text", "json"):
            self.problem(f"{where}: format", f"unknown format {fmt!r}; allowed: text, json")
            fmt = LogSettings.format
        level = (self.string(where, block, "level") or LogSettings.level).lower()
        if level not in ("trace", "debug", "info", "warn", "warning", "error"):
            self.problem(
                f"{where}: level",
                f"unknown level {level!r}; allowed: trace, debug, info, warn, error",
            )
            level = LogSettings.level
        return LogSettings(format="json" if fmt == "json" else "text", level=level)


_KUBERNETES_FIELDS: Final = (
    "kubeconfig",
    "context",
    "namespaces",
    "peering",
    "priority",
    "standalone",
)
#: The `kubernetes` block's fields that set PodSettings (HCL name -> PodSettings field).
_POD_FIELDS: Final = {
    "mhz_per_cpu": "mhz_per_cpu",
    "exec_image": "exec_image",
    "cpu_limit_factor": "cpu_limit_factor",
    "memory_limit_factor": "memory_limit_factor",
    "image_pull_policy": "image_pull_policy",
    "pod_labels": "extra_labels",
    "pod_annotations": "extra_annotations",
    "node_selector": "node_selector",
    "tolerations": "tolerations",
    "service_account_name": "service_account_name",
    "automount_service_account_token": "automount_service_account_token",
    "reserved_ports_as_host_ports": "reserved_ports_as_host_ports",
    "task_dirs": "task_dirs",
}
_PULL_POLICIES: Final = ("Always", "IfNotPresent", "Never")
_TOLERATION_FIELDS: Final = ("key", "operator", "value", "effect", "tolerationSeconds")


def _unwrap(item: Any) -> tuple[tuple[str, ...], dict[str, Any]] | None:
    """One parsed block as (labels, body without the marker); None when it is not a block.

    python-hcl2 nests a labelled block as `{label: {...body, __is_block__: True}}`.
    """
    labels: list[str] = []
    while isinstance(item, dict):
        if item.get(_BLOCK_MARK) is True:
            return tuple(labels), {k: v for k, v in item.items() if k != _BLOCK_MARK}
        if len(item) != 1:
            return None
        label, item = next(iter(item.items()))
        labels.append(str(label))
    return None


def _is_nested_block(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_unwrap(v) is not None for v in value)


def _is_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        labels = host.rstrip(".").split(".")
        return all(
            0 < len(label) <= 63 and label.replace("-", "").isalnum() and label[0] != "-"
            for label in labels
        )


def local_settings(
    name: str,
    api_port: int,
    ops_port: int,
    kubernetes: KubernetesSettings,
    *,
    acl: AclSettings = AclSettings(enabled=False),
    log: LogSettings = LogSettings(),
    graceful_shutdown_wait: float | None = None,
) -> Settings:
    """An operator on this machine: both listeners on 127.0.0.1 without TLS. `allocbridge
    dev`, the cluster tests and the benchmarks write theirs with `render`."""
    return Settings(
        source="<local>",
        controller=ControllerSettings(name, graceful_shutdown_wait),
        listeners=(
            ListenerSettings("api", DEFAULT_HOST, api_port, tls_disable=True),
            ListenerSettings("ops", DEFAULT_HOST, ops_port, tls_disable=True),
        ),
        kubernetes=kubernetes,
        acl=acl,
        log=log,
    )


def render(settings: Settings) -> str:
    """The effective configuration as HCL, defaults filled in (what check-config prints)."""
    lines: list[str] = []
    if settings.controller:
        lines += ["controller {", f'  name = "{settings.controller.name}"']
        if settings.controller.graceful_shutdown_wait is not None:
            wait = format_go_duration(settings.controller.graceful_shutdown_wait)
            lines.append(f'  graceful_shutdown_wait_duration = "{wait}"')
        lines += ["}", ""]
    for item in settings.listeners:
        lines += [
            'listener "tcp" {',
            f'  purpose = "{item.purpose}"',
            f'  address = "{item.address}"',
            f"  tls_disable = {str(item.tls_disable).lower()}",
        ]
        if not item.tls_disable:
            lines += [
                f'  tls_cert_file = "{item.tls_cert_file}"',
                f'  tls_key_file = "{item.tls_key_file}"',
                f'  tls_min_version = "{item.tls_min_version}"',
            ]
        lines += ["}", ""]
    k = settings.kubernetes
    lines += ["kubernetes {"]
    if k.kubeconfig:
        lines.append(f'  kubeconfig = "{k.kubeconfig}"')
    if k.context:
        lines.append(f'  context = "{k.context}"')
    lines += [
        "  namespaces = [" + ", ".join(f'"{n}"' for n in k.namespaces) + "]",
        f'  peering = "{k.peering}"',
        f"  priority = {k.priority}",
        f"  standalone = {str(k.standalone).lower()}",
        *(
            f"  {name} = {_hcl(value)}"
            for name, attribute in _POD_FIELDS.items()
            if (value := getattr(k.pods, attribute)) is not None
        ),
        "}",
        "",
        "acl {",
        f"  enabled = {str(settings.acl.enabled).lower()}",
        "  audiences = [" + ", ".join(f'"{a}"' for a in settings.acl.audiences) + "]",
        "}",
        "",
        f'log {{\n  format = "{settings.log.format}"\n  level = "{settings.log.level}"\n}}',
    ]
    return "\n".join(lines) + "\n"


def _hcl(value: Any) -> str:
    """A value as HCL writes it: strings quoted (JSON's escapes are HCL's), maps, lists."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(k)} = {_hcl(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_hcl(item) for item in value) + "]"
    return str(value)
