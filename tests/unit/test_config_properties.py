"""Property tests of the HCL configuration: any file text loads or is a ConfigError.

`allocbridge run` and `check-config` read a file an operator wrote; whatever is in it, the
answer must be settings or the list of problems, each naming where (a line and column, or the
block and field) and what is wrong, never a traceback. Three generators: arbitrary text, text
assembled from HCL's tokens, and files of our own blocks and fields with values of every type.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocbridge import config

_HCL_TOKENS = [
    "controller", "listener", '"tcp"', "kubernetes", "acl", "log", "{", "}", "[", "]", "=",
    ",", '"', "\n", " ", "#", "//", "/*", "*/", "${", "<<EOF", "EOF", "true", "false", "null",
    "1", "-1", "1.5", '"api"', '"ops"', '"10s"', "name", "purpose", "address", "tls_disable",
    "graceful_shutdown_wait_duration", "enabled", "level", "=>", "?", ":", "(", ")", ".",
]  # fmt: skip
_FIELDS = [
    "name", "graceful_shutdown_wait_duration", "purpose", "address", "tls_disable",
    "tls_cert_file", "tls_key_file", "tls_min_version", "enabled", "level", "format",
    "namespace", "kubeconfig", "audiences", "unknown_field",
]  # fmt: skip
_VALUES = st.one_of(
    st.sampled_from(
        [
            '"api"',
            '"ops"',
            '"10s"',
            '"1m30s"',
            '"3d"',
            '"-5s"',
            '":4646"',
            '"127.0.0.1:0"',
            '"[::1]:9203"',
            '"host:99999"',
            '"tls13"',
            '"tls10"',
            "true",
            "false",
            "0",
            "-1",
            "1e400",
            '""',
            '"*"',
            "[]",
            '["a", 1]',
            "{}",
            "{ a = 1 }",
            "null",
            '"${x}"',
        ]
    ),
    st.integers().map(str),
    st.text(max_size=10).map(lambda text: '"' + text.replace("\\", "").replace('"', "") + '"'),
)
_ATTRIBUTE = st.builds(
    lambda name, value: f"  {name} = {value}\n", st.sampled_from(_FIELDS), _VALUES
)
_BLOCK = st.builds(
    lambda head, body: f"{head} {{\n{''.join(body)}}}\n",
    st.sampled_from(
        [
            "controller",
            'listener "tcp"',
            'listener "udp"',
            "listener",
            "kubernetes",
            "acl",
            "log",
            "other",
            'controller "x"',
        ]
    ),
    st.lists(_ATTRIBUTE, max_size=5),
)
SHAPED_FILES = st.lists(st.one_of(_BLOCK, _ATTRIBUTE), max_size=5).map("".join)
TOKEN_SOUP = st.lists(st.sampled_from(_HCL_TOKENS), max_size=20).map(" ".join)


def _check(text: str, base_dir: Path) -> None:
    try:
        config.load_text(text, source="fuzz.hcl", base_dir=base_dir)
    except config.ConfigError as exc:
        assert exc.problems, text
        for problem in exc.problems:
            where, _, what = problem.partition(": ")
            assert where and what, problem  # "<line/column or block and field>: <what>"
        assert str(exc).startswith("fuzz.hcl: ")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=80))
def test_any_text_loads_or_is_a_config_error(text: str) -> None:
    _check(text, Path("/nonexistent"))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TOKEN_SOUP)
def test_any_hcl_token_soup_loads_or_is_a_config_error(text: str) -> None:
    _check(text, Path("/nonexistent"))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SHAPED_FILES)
def test_any_file_of_our_blocks_loads_or_is_a_config_error(text: str) -> None:
    _check(text, Path("/nonexistent"))
