"""Exec frames without I/O: Nomad's (model.execframes) and Kubernetes' (cluster.podexec)."""

from __future__ import annotations

import base64
import json

import pytest

from allocbridge.api.exec import parse_command, parse_flag
from allocbridge.cluster.podexec import (
    Channel,
    ExecError,
    encode_close,
    encode_frame,
    encode_resize,
    exit_code_from_status,
)
from allocbridge.model.execframes import (
    HEARTBEAT_FRAME,
    MAX_REASON,
    OUTPUT_CHUNK,
    ClientFrame,
    FrameError,
    close_reason,
    decode_client_frame,
    encode_exited,
    encode_output,
    encode_output_close,
    encode_small_output,
    keystroke_stdin,
    parse_handshake,
)

ALL_BYTES = bytes(range(256))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- client frames ---------------------------------------------------------------------------


def test_stdin_data_is_base64_and_binary_safe() -> None:
    frame = decode_client_frame(json.dumps({"stdin": {"data": b64(ALL_BYTES)}}))
    assert frame == ClientFrame(stdin=ALL_BYTES)
    assert not frame.is_heartbeat


def test_stdin_close_and_data_in_one_frame() -> None:
    frame = decode_client_frame(json.dumps({"stdin": {"data": b64(b"x"), "close": True}}))
    assert (frame.stdin, frame.stdin_close) == (b"x", True)


def test_tty_size_is_width_then_height() -> None:
    frame = decode_client_frame('{"tty_size":{"height":40,"width":120}}')
    assert frame.tty_size == (120, 40)


@pytest.mark.parametrize(
    "message", ["{}", b"{}", '{"unknown":1}', '{"stdin":{}}', '{"stdin":null}']
)
def test_heartbeats_and_unknown_keys_carry_nothing(message: str | bytes) -> None:
    assert decode_client_frame(message).is_heartbeat


def test_binary_messages_are_read_like_text() -> None:
    raw = json.dumps({"stdin": {"data": b64(b"hi")}}).encode()
    assert decode_client_frame(raw).stdin == b"hi"


@pytest.mark.parametrize(
    "message",
    [
        b'{"stdin":{"data":"eA=="}}',  # the nomad CLI's keystroke
        b' {\t"stdin" :\r\n{ "data": "eA==" } }\n',  # JSON whitespace anywhere
        b'{"stdin":{"data":""}}',
        b'{"stdin":{"data":"' + base64.b64encode(bytes(range(256))) + b'"}}',
        b'{"stdin":{"data":"eA="}}',  # bad padding: the JSON path says so
        b'{"stdin":{"data":"eA=="},"x":{"y":"z"}}',  # another key after it
        b'{"stdin":{"data":"eA==","close":true}}',
        b'\x0c{"stdin":{"data":"eA=="}}',  # form feed is not JSON whitespace
        b'{"stdin":{"data":"e\\u0041=="}}',  # an escape: not base64 as written
    ],
)
def test_the_keystroke_shortcut_reads_frames_as_the_json_decoder_does(message: bytes) -> None:
    def by_json() -> object:
        try:
            frame = json.loads(message)
        except ValueError:
            return "error"
        stdin = frame.get("stdin") or {}
        try:
            data = base64.b64decode(stdin.get("data", ""), validate=True)
        except ValueError:
            return "error"
        return (data, bool(stdin.get("close", False)), frame.get("tty_size"))

    try:
        decoded = decode_client_frame(message)
    except FrameError:
        assert by_json() == "error"
    else:
        assert by_json() == (decoded.stdin, decoded.stdin_close, decoded.tty_size)


@pytest.mark.parametrize(
    ("message", "stdin"),
    [
        (b'{"stdin":{"data":"eA=="}}', b"x"),  # the web UI's keystroke
        (b'{"stdin":{"data":"eA=="}}\n', b"x"),  # the Go SDK's (WriteJSON adds a newline)
        (b'{"stdin":{"data":""}}', b""),
        (b'{"stdin":{"data":"' + base64.b64encode(ALL_BYTES) + b'"}}\n', ALL_BYTES),
        (b'{"stdin":{"data":"eA="}}', None),  # bad padding: decode_client_frame says so
        (b'{"stdin":{"data":"eA"}}', None),
        (b'{"stdin":{"data":"eA=="}}\n\n', None),  # other whitespace: the regular path
        (b'{"stdin":{"data":"eA=="}} ', None),
        (b' {"stdin":{"data":"eA=="}}', None),
        (b'{"stdin":{"data":"eA=="},"x":1}', None),
        (b'{"stdin":{"data":"eA==","close":true}}', None),
        (b'{"stdin":{"data":"e\\u0041=="}}', None),  # an escape
        (b'{"stdin":{"data":"eA=\\n="}}', None),
        (b'{"stdin":{"data":"eA=="}', None),  # not JSON
        (b'{"stdin":{"data":"eA=="}}}', None),
        (b'{"stdin":{"data":"', None),
    ],
)
def test_the_keystroke_slice_reads_only_frames_that_carry_stdin_alone(
    message: bytes, stdin: bytes | None
) -> None:
    assert keystroke_stdin(message) == stdin
    if stdin is not None:
        assert decode_client_frame(message) == ClientFrame(stdin=stdin)


def test_the_keystroke_slice_takes_the_go_sdks_and_the_web_uis_frames() -> None:
    for data in (b"x", b"\x7f", ALL_BYTES):
        compact = json.dumps({"stdin": {"data": b64(data)}}, separators=(",", ":")).encode()
        assert keystroke_stdin(compact) == data
        assert keystroke_stdin(compact + b"\n") == data


def test_a_small_output_frame_is_encode_outputs_one_frame() -> None:
    for data in (b"x", b"\x08\x1b[J", ALL_BYTES, b"y" * OUTPUT_CHUNK):
        for stream in ("stdout", "stderr"):
            assert [encode_small_output(stream, data)] == encode_output(stream, data)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("not json", "invalid exec frame: "),
        ("[1]", "invalid exec frame: not a JSON object"),
        ('{"stdin":{"data":"***"}}', "stdin data is not base64"),
        ('{"stdin":{"data":5}}', "stdin data must be a base64 string"),
        ('{"stdin":"x"}', "stdin must be an object"),
        ('{"stdin":{"close":"yes"}}', "stdin close must be a boolean"),
        ('{"tty_size":{"height":-1,"width":80}}', "tty_size height must be an integer"),
        ('{"tty_size":{"height":24,"width":70000}}', "tty_size width must be an integer"),
        ('{"tty_size":{"height":true,"width":80}}', "tty_size height must be an integer"),
        ('{"tty_size":[24,80]}', "tty_size must be an object"),
        (b"\xff\xfe", "invalid exec frame: "),
    ],
)
def test_bad_client_frames_say_what_is_wrong(message: str | bytes, reason: str) -> None:
    with pytest.raises(FrameError, match=reason.replace("(", r"\(")):
        decode_client_frame(message)


# -- server frames ---------------------------------------------------------------------------


def test_output_is_chunked_in_order_and_round_trips() -> None:
    data = bytes(i % 251 for i in range(OUTPUT_CHUNK * 2 + 5))
    frames = encode_output("stdout", data)
    assert len(frames) == 3
    decoded = [base64.b64decode(json.loads(f)["stdout"]["data"]) for f in frames]
    assert [len(d) for d in decoded] == [OUTPUT_CHUNK, OUTPUT_CHUNK, 5]
    assert b"".join(decoded) == data


def test_output_frames_are_compact_json() -> None:
    assert encode_output("stderr", b"e\n") == [b'{"stderr":{"data":"ZQo="}}']
    assert encode_output("stdout", b"") == []
    assert encode_output("stdout", b"abcd", chunk=3) == [
        b'{"stdout":{"data":"YWJj"}}',
        b'{"stdout":{"data":"ZA=="}}',
    ]


def test_close_exit_and_heartbeat_frames() -> None:
    assert encode_output_close("stdout") == b'{"stdout":{"close":true}}'
    assert encode_output_close("stderr") == b'{"stderr":{"close":true}}'
    assert encode_exited(0) == b'{"exited":true,"result":{"exit_code":0}}'
    assert json.loads(encode_exited(137)) == {"exited": True, "result": {"exit_code": 137}}
    assert json.loads(HEARTBEAT_FRAME) == {}


# -- handshake, parameters, close reasons ----------------------------------------------------


def test_handshake_token_replaces_a_missing_header_token() -> None:
    assert parse_handshake('{"version":1,"auth_token":"secret"}', None) == "secret"
    assert parse_handshake(b'{"version":1,"auth_token":"secret"}', None) == "secret"


def test_empty_handshake_token_keeps_the_header_token() -> None:
    assert parse_handshake('{"version":1,"auth_token":""}', "hdr") == "hdr"
    assert parse_handshake('{"version":1}', None) is None


@pytest.mark.parametrize(
    ("message", "header", "reason"),
    [
        ('{"version":2,"auth_token":"x"}', None, "unexpected handshake value: 2"),
        ('{"auth_token":"x"}', None, "unexpected handshake value: 0"),
        ('{"version":true}', None, "unexpected handshake value: true"),
        ('{"version":1,"auth_token":"a"}', "b", "handshake auth token mismatched auth header"),
        ('{"version":1,"auth_token":5}', None, "auth_token"),
        ("nope", None, "Expecting value"),
    ],
)
def test_bad_handshakes(message: str, header: str | None, reason: str) -> None:
    with pytest.raises(FrameError, match=reason):
        parse_handshake(message, header)


def test_command_is_a_json_array_of_strings() -> None:
    assert parse_command('["sh","-c","echo hi"]') == ["sh", "-c", "echo hi"]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "failed to marshal command into json: unexpected end of JSON input"),
        ("", "failed to marshal command into json: unexpected end of JSON input"),
        ("echo hi", "failed to marshal command into json: "),
        ('"echo"', "cannot unmarshal string into Go value of type \\[\\]string"),
        ('["echo", 1]', "cannot unmarshal number into Go value of type \\[\\]string"),
        ('{"a":1}', "cannot unmarshal object into Go value of type \\[\\]string"),
        ("[[]]", "cannot unmarshal array into Go value of type \\[\\]string"),
        ("[null]", "cannot unmarshal null into Go value of type \\[\\]string"),
        ("[]", "^command is not present$"),
        ("null", "^command is not present$"),
    ],
)
def test_bad_commands(raw: str | None, reason: str) -> None:
    with pytest.raises(FrameError, match=reason):
        parse_command(raw)


@pytest.mark.parametrize(
    ("value", "expected"), [("", False), ("true", True), ("1", True), ("F", False)]
)
def test_flags_read_as_go_parse_bool(value: str, expected: bool) -> None:
    assert parse_flag({"tty": value}, "tty") is expected
    assert parse_flag({}, "tty") is False


def test_bad_flag_gives_nomads_text() -> None:
    with pytest.raises(FrameError) as caught:
        parse_flag({"tty": "maybe"}, "tty")
    assert str(caught.value) == (
        'tty value is not a boolean: strconv.ParseBool: parsing "maybe": invalid syntax'
    )


def test_close_reasons_fit_a_close_frame_on_character_boundaries() -> None:
    assert close_reason("short") == "short"
    long = "é" * 100  # 200 bytes
    cut = close_reason(long)
    head, tail = cut.split("...")
    assert len(cut.encode()) <= MAX_REASON
    assert head == "é" * len(head) and tail == "é" * len(tail) and head and tail


def test_a_long_reason_keeps_its_start_and_its_cause_at_the_end() -> None:
    """A runtime's error chain: the cause is its last part."""
    text = (
        'failed to exec in container: failed to start exec "' + "a" * 64 + '": OCI runtime '
        "exec failed: exec failed: unable to start container process: exec: "
        '"nope": executable file not found in $PATH: unknown'
    )
    cut = close_reason(text)
    assert len(cut.encode()) <= MAX_REASON
    assert cut.startswith("failed to exec in container")
    assert cut.endswith('exec: "nope": executable file not found in $PATH: unknown')


# -- Kubernetes channels ---------------------------------------------------------------------


def test_channel_frames() -> None:
    assert encode_frame(Channel.STDIN, b"abc") == b"\x00abc"
    assert encode_close(Channel.STDIN) == b"\xff\x00"


def test_resize_is_kubernetes_terminal_size() -> None:
    frame = encode_resize(120, 40)
    assert frame[0] == Channel.RESIZE
    assert json.loads(frame[1:]) == {"Width": 120, "Height": 40}


def test_success_status_is_exit_code_zero() -> None:
    assert exit_code_from_status(b'{"metadata":{},"status":"Success"}') == 0


def test_non_zero_exit_code_comes_from_the_exit_code_cause() -> None:
    status = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "message": "command terminated with non-zero exit code: exit status 42",
        "details": {
            "causes": [{"reason": "Other", "message": "x"}, {"reason": "ExitCode", "message": "42"}]
        },
    }
    assert exit_code_from_status(json.dumps(status).encode()) == 42


def test_non_zero_exit_without_its_cause_is_an_error() -> None:
    status = {"status": "Failure", "reason": "NonZeroExitCode", "message": "no details"}
    with pytest.raises(ExecError, match="without an exit code"):
        exit_code_from_status(json.dumps(status).encode())


def test_go_exit_status_in_an_internal_error_is_the_exit_code() -> None:
    """kwok's report of `sh -c 'exit 3'`, as the API server relays it."""
    message = (
        "Internal error occurred: error executing command in container: cmd wait: "
        'sh -c echo "exit status 9"; exit 3: exit status 3'
    )
    status = {"status": "Failure", "reason": "InternalError", "message": message, "code": 500}
    assert exit_code_from_status(json.dumps(status).encode()) == 3


@pytest.mark.parametrize(
    "payload",
    [
        b'{"status":"Failure","reason":"InternalError","message":"container not found"}',
        b'{"status":"Failure","message":"exit status 3 happened earlier, then it broke"}',
        b"not json",
        b"[]",
    ],
)
def test_other_failures_are_errors(payload: bytes) -> None:
    with pytest.raises(ExecError):
        exit_code_from_status(payload)


def test_failure_messages_lose_the_wrappers_each_hop_adds() -> None:
    message = (
        "Internal error occurred: Internal error occurred: error executing command in "
        'container: cmd start: nosuch : exec: "nosuch": executable file not found in $PATH'
    )
    payload = json.dumps({"status": "Failure", "reason": "InternalError", "message": message})
    with pytest.raises(ExecError) as caught:
        exit_code_from_status(payload.encode())
    assert caught.value.message == (
        'cmd start: nosuch : exec: "nosuch": executable file not found in $PATH'
    )
