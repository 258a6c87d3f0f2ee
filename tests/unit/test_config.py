"""The HCL configuration: defaults, every accepted form and every error message."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from allocbridge import config
from allocbridge.cli import main
from allocbridge_localcluster.devmode import dev_config

OPEN_LISTENERS = """
listener "tcp" {
  purpose = "api"
  tls_disable = true
}
listener "tcp" {
  purpose = "ops"
  tls_disable = true
}
"""


def load(text: str, base_dir: Path | None = None) -> config.Settings:
    return config.load_text(text, source="test.hcl", base_dir=base_dir)


def problems(text: str, base_dir: Path | None = None) -> list[str]:
    with pytest.raises(config.ConfigError) as info:
        load(text, base_dir)
    return info.value.problems


def test_defaults_of_a_minimal_file() -> None:
    settings = load('controller { name = "c1" }' + OPEN_LISTENERS)
    api, ops = settings.listener("api"), settings.listener("ops")
    assert api is not None and (api.host, api.port) == ("127.0.0.1", 4646)
    assert ops is not None and (ops.host, ops.port) == ("127.0.0.1", 9203)
    assert settings.controller == config.ControllerSettings(name="c1")
    assert settings.acl.enabled is True
    assert settings.acl.audiences == ()  # the API server's own audience
    assert settings.health_enabled


def test_acl_audiences_are_read_and_rendered() -> None:
    settings = load('acl {\n audiences = ["allocbridge", "nomad"]\n}' + OPEN_LISTENERS)
    assert settings.acl.audiences == ("allocbridge", "nomad")
    assert 'audiences = ["allocbridge", "nomad"]' in config.render(settings)
    assert load(config.render(settings)).acl == settings.acl


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ('"10s"', 10.0),
        ('"1m30s"', 90.0),
        ("15", 15.0),
        ('"15"', 15.0),
        ('"2d"', 172800.0),
        ('"1500ms"', 1.5),
        ('"0"', 0.0),
    ],
)
def test_graceful_shutdown_wait_duration_forms(value: str, seconds: float) -> None:
    text = f'controller {{\n name = "c"\n graceful_shutdown_wait_duration = {value}\n}}'
    settings = load(text + OPEN_LISTENERS)
    assert settings.controller is not None
    assert settings.controller.graceful_shutdown_wait == seconds


@pytest.mark.parametrize(
    ("address", "purpose", "host", "port"),
    [
        ("0.0.0.0", "api", "0.0.0.0", 4646),
        ("0.0.0.0:8080", "api", "0.0.0.0", 8080),
        ("localhost", "ops", "localhost", 9203),
        ("[::1]:9999", "ops", "::1", 9999),
        ("::1", "ops", "::1", 9203),
        (":7000", "api", "", 7000),  # every interface, as Go's net.Listen(":7000")
        (":", "ops", "127.0.0.1", 9203),
    ],
)
def test_listener_addresses(address: str, purpose: str, host: str, port: int) -> None:
    text = f'listener "tcp" {{\n purpose = "{purpose}"\n address = "{address}"\n'
    text += " tls_disable = true\n}"
    listener = load(text).listeners[0]
    assert (listener.host, listener.port) == (host, port)


def test_an_every_interface_address_survives_check_config() -> None:
    text = 'listener "tcp" {\n purpose = "ops"\n address = ":7000"\n tls_disable = true\n}'
    loaded = load(text)
    rendered = config.render(loaded)
    assert 'address = ":7000"' in rendered
    assert load(rendered).listeners == loaded.listeners


def test_health_needs_controller_api_and_ops() -> None:
    assert not load(OPEN_LISTENERS).health_enabled
    only_api = (
        'controller { name = "c" }\nlistener "tcp" {\n purpose = "api"\n tls_disable = true\n}'
    )
    assert not load(only_api).health_enabled


def test_tls_files_are_resolved_against_the_config_folder(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("x")
    (tmp_path / "key.pem").write_text("x")
    text = """listener "tcp" {
      purpose = "api"
      tls_cert_file = "cert.pem"
      tls_key_file = "key.pem"
      tls_min_version = "tls13"
    }"""
    listener = load(text, base_dir=tmp_path).listeners[0]
    assert listener.tls_cert_file == str(tmp_path / "cert.pem")
    assert listener.tls_min_version == "tls13"


ERRORS = [
    pytest.param(
        'listener "tcp" {\n purpose = "cluster"\n tls_disable = true\n}',
        'listener "tcp" #1: purpose: "cluster" is not supported by allocbridge; '
        'allowed: "api", "ops"',
        id="cluster-purpose",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = "proxy"\n tls_disable = true\n}',
        'listener "tcp" #1: purpose: "proxy" is not supported by allocbridge; '
        'allowed: "api", "ops"',
        id="proxy-purpose",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = "web"\n tls_disable = true\n}',
        'listener "tcp" #1: purpose: unknown purpose \'web\'; allowed: "api", "ops"',
        id="unknown-purpose",
    ),
    pytest.param(
        'listener "tcp" {\n tls_disable = true\n}',
        'listener "tcp" #1: purpose: is required; allowed: "api", "ops"',
        id="missing-purpose",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = ["api", "ops"]\n tls_disable = true\n}',
        'listener "tcp" #1: purpose: exactly one purpose per listener is supported; '
        'allowed: "api", "ops"',
        id="two-purposes",
    ),
    pytest.param(
        'listener "unix" {\n purpose = "api"\n}',
        'listener "unix" #1: unsupported listener type "unix"; allowed: "tcp"',
        id="unix-listener",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = "api"\n}',
        'listener "tcp" #1 (purpose "api"): tls_cert_file: is required unless '
        "tls_disable = true (TLS is on by default)",
        id="tls-cert-required",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = "api"\n tls_cert_file = "/nonexistent/c.pem"\n'
        ' tls_key_file = "/nonexistent/k.pem"\n}',
        'listener "tcp" #1 (purpose "api"): tls_cert_file: file not found: /nonexistent/c.pem',
        id="tls-cert-missing-file",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = "api"\n tls_disable = true\n tls_min_version = "tls11"\n}',
        'listener "tcp" #1 (purpose "api"): tls_min_version: unsupported minimum TLS version '
        "'tls11'; allowed: tls12, tls13",
        id="tls-version",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = "api"\n tls_disable = "maybe"\n}',
        'listener "tcp" #1 (purpose "api"): tls_disable: must be true or false, got \'maybe\'',
        id="tls-disable-not-bool",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = "api"\n tls_disable = true\n address = "1.2.3.4:99999"\n}',
        'listener "tcp" #1 (purpose "api"): address: port \'99999\' is not a number '
        "from 0 to 65535",
        id="bad-port",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = "api"\n tls_disable = true\n address = "bad host!"\n}',
        'listener "tcp" #1 (purpose "api"): address: \'bad host!\' is not an IP address '
        "or host name",
        id="bad-host",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = "api"\n tls_disable = true\n colour = "red"\n}',
        'listener "tcp" #1 (purpose "api"): colour: unknown field; allowed: address, purpose, '
        "tls_cert_file, tls_disable, tls_key_file, tls_min_version",
        id="unknown-listener-field",
    ),
    pytest.param(
        OPEN_LISTENERS + 'listener "tcp" {\n purpose = "api"\n tls_disable = true\n}',
        'listener "tcp" #3: purpose: a listener with purpose "api" is already defined (#1); '
        "allowed: one api and one ops listener",
        id="duplicate-purpose",
    ),
    pytest.param(
        'controller {\n name = "c"\n graceful_shutdown_wait_duration = "soon"\n}',
        "controller block: graceful_shutdown_wait_duration: 'soon' is not a duration; allowed: "
        'a Go duration like "10s" or "1m30s", a whole number of seconds, or "Nd" days',
        id="bad-duration",
    ),
    pytest.param(
        'controller {\n name = "c"\n graceful_shutdown_wait_duration = "-5s"\n}',
        "controller block: graceful_shutdown_wait_duration: '-5s' is not a duration; allowed: "
        'a Go duration like "10s" or "1m30s", a whole number of seconds, or "Nd" days',
        id="negative-duration",
    ),
    pytest.param(
        'controller {\n name = "c"\n workers = 3\n}',
        "controller block: workers: unknown field; allowed: description, "
        "graceful_shutdown_wait_duration, name",
        id="unknown-controller-field",
    ),
    pytest.param(
        "controller {\n name = 5\n}",
        "controller block: name: must be a string, got 5",
        id="controller-name-type",
    ),
    pytest.param(
        'worker {\n name = "w"\n}',
        "block 'worker': unknown block; allowed: acl, controller, kubernetes, listener, log",
        id="unknown-block",
    ),
    pytest.param(
        "acl {\n enabled = 3\n}",
        "acl block: enabled: must be true or false, got 3",
        id="acl-enabled-type",
    ),
    pytest.param(
        'acl {\n audiences = "allocbridge"\n}',
        "acl block: audiences: must be a list of non-empty audience names",
        id="acl-audiences-type",
    ),
    pytest.param(
        'acl {\n audiences = ["allocbridge", ""]\n}',
        "acl block: audiences: must be a list of non-empty audience names",
        id="acl-audiences-empty",
    ),
    pytest.param(
        'log {\n format = "xml"\n}',
        "log block: format: unknown format 'xml'; allowed: text, json",
        id="log-format",
    ),
    pytest.param(
        'log {\n level = "loud"\n}',
        "log block: level: unknown level 'loud'; allowed: trace, debug, info, warn, error",
        id="log-level",
    ),
    pytest.param(
        'kubernetes {\n namespaces = "default"\n}',
        "kubernetes block: namespaces: must be a list of namespace names",
        id="namespaces-type",
    ),
    pytest.param(
        "kubernetes {\n mhz_per_cpu = 0\n}",
        "kubernetes block: mhz_per_cpu: must be greater than 0",
        id="mhz-per-cpu",
    ),
    pytest.param(
        "controller {\n name = \n}",
        "line 2, column 9: invalid HCL: Unexpected token",
        id="syntax-error",
    ),
]


ATTRIBUTE_INSTEAD_OF_BLOCK = [
    pytest.param(
        'controller = { name = "x" }',
        "controller: must be a block (controller { ... }), not an attribute (controller = ...)",
        id="controller",
    ),
    pytest.param(
        'listener = { purpose = "api" }',
        'listener: must be a block (listener "tcp" { ... }), not an attribute (listener = ...)',
        id="listener",
    ),
    pytest.param(
        'listener = [{ purpose = "api" }]',
        'listener: must be a block (listener "tcp" { ... }), not an attribute (listener = ...)',
        id="listener-list",
    ),
    pytest.param(
        'kubernetes = { namespaces = ["a"] }',
        "kubernetes: must be a block (kubernetes { ... }), not an attribute (kubernetes = ...)",
        id="kubernetes",
    ),
    pytest.param(
        "acl = true",
        "acl: must be a block (acl { ... }), not an attribute (acl = ...)",
        id="acl",
    ),
    pytest.param(
        'log = "json"',
        "log: must be a block (log { ... }), not an attribute (log = ...)",
        id="log",
    ),
    pytest.param(
        "controller = []",
        "controller: must be a block (controller { ... }), not an attribute (controller = ...)",
        id="controller-empty-list",
    ),
]


@pytest.mark.parametrize(("text", "expected"), ATTRIBUTE_INSTEAD_OF_BLOCK)
def test_a_block_written_as_an_attribute_is_named(text: str, expected: str) -> None:
    assert problems(text + OPEN_LISTENERS if "listener" not in text else text) == [expected]


BLOCK_SHAPE_MISTAKES = [
    pytest.param(
        'controller "c1" {\n name = "x"\n}',
        'controller block: takes no label, got "c1"; write controller { ... }',
        id="labelled-controller",
    ),
    pytest.param(
        'listener {\n purpose = "api"\n}',
        'listener #1: needs its type as the one label: listener "tcp" { ... }',
        id="unlabelled-listener",
    ),
    pytest.param(
        'listener "tcp" "api" {\n purpose = "api"\n}',
        'listener #1: needs its type as the one label: listener "tcp" { ... }; got "tcp" "api"',
        id="two-labels",
    ),
    pytest.param(
        "kubernetes {\n namespaces {\n }\n}",
        "kubernetes block: namespaces: must be an attribute (namespaces = ...), not a block",
        id="field-as-block",
    ),
    pytest.param(
        'controller {\n name = "c"\n graceful_shutdown_wait_duration = ["10s"]\n}',
        "controller block: graceful_shutdown_wait_duration: ['10s'] is not a duration; "
        'allowed: a Go duration like "10s" or "1m30s", a whole number of seconds, or "Nd" days',
        id="duration-list",
    ),
    pytest.param(
        "controller {\n graceful_shutdown_wait_duration = { s = 10 }\n}",
        "controller block: graceful_shutdown_wait_duration: {'s': 10} is not a duration",
        id="duration-object",
    ),
    pytest.param(
        "controller {\n graceful_shutdown_wait_duration = true\n}",
        "controller block: graceful_shutdown_wait_duration: True is not a duration",
        id="duration-bool",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = { api = true }\n tls_disable = true\n}',
        'listener "tcp" #1: purpose: must be "api" or "ops", got {\'api\': True}',
        id="purpose-object",
    ),
    pytest.param(
        'listener "tcp" {\n purpose = [["api"]]\n tls_disable = true\n}',
        'listener "tcp" #1: purpose: must be "api" or "ops", got [\'api\']',
        id="purpose-nested-list",
    ),
]


@pytest.mark.parametrize(("text", "expected"), ERRORS + BLOCK_SHAPE_MISTAKES)
def test_every_mistake_is_named(text: str, expected: str) -> None:
    found = problems(text)
    assert any(p.startswith(expected) for p in found), found


FIELDS = {
    "controller": ("name", "description", "graceful_shutdown_wait_duration"),
    'listener "tcp"': (
        "purpose",
        "address",
        "tls_disable",
        "tls_cert_file",
        "tls_key_file",
        "tls_min_version",
    ),
    "kubernetes": (
        "kubeconfig",
        "context",
        "namespaces",
        "peering",
        "priority",
        "standalone",
        *config._POD_FIELDS,
    ),
    "acl": ("enabled", "audiences"),
    "log": ("format", "level"),
}
ODD_VALUES = ("[]", '["x"]', "[[1]]", "{ a = 1 }", "true", "1.5", "-1", "null", '""')


@pytest.mark.parametrize(
    ("block", "field"), [(block, name) for block, names in FIELDS.items() for name in names]
)
def test_no_value_of_the_wrong_type_escapes_as_a_traceback(block: str, field: str) -> None:
    """Every field, given every kind of HCL value (and a nested block), is either accepted or
    reported as a problem: nothing else may come out of the loader."""
    for value in [f"{field} = {odd}" for odd in ODD_VALUES] + [f"{field} {{\n}}"]:
        text = f"{block} {{\n {value}\n}}\n"
        with contextlib.suppress(config.ConfigError):
            load(text)


def test_check_config_names_blocks_written_as_attributes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "attrs.hcl"
    path.write_text(
        'controller = { name = "x" }\nacl = true\nkubernetes = { namespaces = ["a"] }\n'
        'log = "json"\n' + OPEN_LISTENERS
    )
    assert main(["check-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"4 problem(s) in {path}:")
    for name in ("controller", "acl", "kubernetes", "log"):
        assert f"  - {name}: must be a block ({name} {{ ... }}), not an attribute" in err
    assert "may appear only once" not in err and "Traceback" not in err


def test_check_config_names_a_duration_of_the_wrong_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "wait.hcl"
    path.write_text('controller {\n graceful_shutdown_wait_duration = ["10s"]\n}' + OPEN_LISTENERS)
    assert main(["check-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"1 problem(s) in {path}:")
    assert "  - controller block: graceful_shutdown_wait_duration: ['10s'] is not a duration" in err


def test_all_problems_are_reported_together() -> None:
    text = (
        'controller {\n colour = 1\n}\nlistener "tcp" {\n purpose = "proxy"\n}\nacl { enabled = 2 }'
    )
    assert len(problems(text)) == 3


def test_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.hcl"
    path.write_text('listener "tcp" {\n purpose = "cluster"\n}\n')
    with pytest.raises(config.ConfigError) as info:
        config.load_file(path)
    assert str(info.value).startswith(f"{path}: listener")


def test_unreadable_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="cannot read the file"):
        config.load_file(tmp_path / "missing.hcl")


def test_check_config_prints_the_effective_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ok.hcl"
    path.write_text(
        'controller {\n name = "c1"\n graceful_shutdown_wait_duration = 90\n}' + OPEN_LISTENERS
    )
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert 'graceful_shutdown_wait_duration = "1m30s"' in out
    assert 'address = "127.0.0.1:4646"' in out and 'address = "127.0.0.1:9203"' in out
    assert load(out).listeners == load(path.read_text()).listeners  # the output is valid config


def test_check_config_lists_errors_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.hcl"
    path.write_text('listener "tcp" {\n purpose = "cluster"\n}\nacl { enabled = "x" }\n')
    assert main(["check-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"2 problem(s) in {path}:")
    assert '"cluster" is not supported' in err and "acl block: enabled" in err


def test_a_local_operators_settings_survive_render_and_load() -> None:
    """`allocbridge dev`, the cluster tests and the benchmarks write their operator's file with
    `local_settings` and `render`; what the operator then loads is what they asked for."""
    kubernetes = config.KubernetesSettings(
        kubeconfig="/state/kubeconfig",
        namespaces=("team-a", "team-b"),
        standalone=False,
        peering="bench",
        priority=100,
    )
    asked = config.local_settings(
        "replica-1",
        14646,
        19203,
        kubernetes,
        acl=config.AclSettings(True, ("allocbridge",)),
        graceful_shutdown_wait=1.5,
    )

    loaded = config.load_text(config.render(asked), source="<local>")

    assert loaded == asked
    assert loaded.health_enabled
    assert [(item.address, item.tls_disable) for item in loaded.listeners] == [
        ("127.0.0.1:14646", True),
        ("127.0.0.1:19203", True),
    ]


def test_local_settings_default_to_a_standalone_open_replica() -> None:
    settings = config.local_settings(
        "dev", 4646, 9203, config.KubernetesSettings(kubeconfig="/k", standalone=True)
    )
    assert not settings.acl.enabled
    assert settings.controller == config.ControllerSettings("dev", None)


def test_allocbridge_devs_file_loads_as_an_open_standalone_replica(tmp_path: Path) -> None:
    text = dev_config(4646, 9203, tmp_path / "kubeconfig")
    settings = config.load_text(text)
    assert text.startswith("# Written by `allocbridge dev`.")
    assert (settings.kubernetes.standalone, settings.acl.enabled) == (True, False)
    assert settings.kubernetes.kubeconfig == str(tmp_path / "kubeconfig")
    assert settings.controller == config.ControllerSettings("allocbridge-dev", 2.0)
    assert [item.port for item in settings.listeners] == [4646, 9203]
