"""The OpenAPI 3 description of the `/v1` API, served at `GET /v1/openapi.json`.

A static document: a test compares its paths and methods with the router's, so an endpoint
added without its description (or the reverse) fails the build. Write endpoints add their
operations here when they land.

The parameter and body schemas say exactly what the handlers accept, no more and no less
(UUID patterns, Go booleans as the strings Go's ParseBool takes, integer ranges, required
fields, enums), because tests/unit/test_schemathesis.py fuzzes the server against this
document: a value the document allows must not be refused with 400, and one it forbids must
be (docs/reliability.md).
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.routing import Endpoint
from allocbridge.model.signals import NAMES as SIGNAL_NAMES
from allocbridge.model.signals import NUMBERS as SIGNAL_NUMBERS
from allocbridge.model.signals import SPACE as SIGNAL_SPACE
from allocbridge.store import encoding

Json = dict[str, Any]


def _ref(kind: str, name: str) -> Json:
    return {"$ref": f"#/components/{kind}/{name}"}


def _param(name: str, where: str, schema: Json, description: str, **extra: Any) -> Json:
    return {"name": name, "in": where, "schema": schema, "description": description, **extra}


_STRING: Final[Json] = {"type": "string"}
_INT: Final[Json] = {"type": "integer", "format": "int64"}
_BOOL: Final[Json] = {"type": "boolean"}
_NULLABLE_BOOL: Final[Json] = {"type": "boolean", "nullable": True}
_NS_TIME: Final[Json] = {"type": "integer", "format": "int64", "description": "Unix nanoseconds"}
_ANY_OBJECT: Final[Json] = {"type": "object", "additionalProperties": True}
#: What Go's `strconv.ParseBool` takes, plus the empty string (Nomad's "not set").
_GO_BOOL: Final[Json] = {
    "type": "string",
    "enum": ["", "1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"],
}
_HEX: Final = "[0-9a-fA-F]"
#: A full ID. The server also takes other hyphen placements of 32 hex digits (memdb compares
#: decoded bytes), but those name no allocation in practice: 404 either way.
_UUID: Final[Json] = {
    "type": "string",
    "pattern": f"^{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}$",
}
#: memdb's prefix rules: at most 36 characters and 4 hyphens, an even number of hex digits.
_ID_PREFIX: Final[Json] = {
    "type": "string",
    "maxLength": 36,
    "pattern": f"^(?!(?:[^-]*-){{5}})(?:-*{_HEX}-*{_HEX})*-*$",
}
#: The digits each unit of a duration part may have, so that 8 parts at most stay inside Go's
#: range (2^63 ns, about 2,562,047 h): the largest part, 10^N - 1 units, is under 277,778 h.
_DURATION_DIGITS: Final = (
    ("h", 5), ("m", 7), ("s", 9), ("ms", 12), ("us|µs|μs", 15), ("ns", 18)
)  # fmt: skip


def _go_duration() -> Json:
    """Go's `time.ParseDuration` syntax, or empty (the default).

    Go refuses a duration past its range, which no pattern can say exactly; the pattern keeps
    to durations that fit (up to 8 parts, bounded digits per unit). Longer forms that fit are
    taken too, so a fuzzer's out-of-pattern value is refused unless it is such a form."""
    parts = "|".join(
        f"(?:[0-9]{{1,{digits}}}(?:\\.[0-9]*)?|\\.[0-9]+)(?:{units})"
        for units, digits in _DURATION_DIGITS
    )
    return {"type": "string", "pattern": f"^(?:[-+]?(?:0|(?:{parts}){{1,8}}))?$"}


_UINT64: Final[Json] = {"type": "integer", "minimum": 0, "maximum": 2**64 - 1}
_INT32: Final[Json] = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
_NAME: Final[Json] = {"type": "string", "minLength": 1}


def _ascii_case_insensitive(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


def _signal() -> Json:
    """What `model.signals.canonical` takes: a name with or without `SIG` in any ASCII case,
    or its number (leading zeros allowed), with ASCII whitespace around it."""
    names = sorted({name.removeprefix("SIG") for name in SIGNAL_NAMES}, key=len, reverse=True)
    numbers = sorted((str(n) for n in SIGNAL_NUMBERS), key=len, reverse=True)
    space = "[" + "".join(f"\\x{ord(c):02x}" for c in SIGNAL_SPACE) + "]*"
    word = (
        f"(?:{_ascii_case_insensitive('SIG')})?(?:{'|'.join(map(_ascii_case_insensitive, names))})"
    )
    return {
        "type": "string",
        "pattern": f"^{space}(?:{word}|0*(?:{'|'.join(numbers)})){space}$",
        "description": "A signal name such as `SIGUSR1` (also `usr1`) or its Linux number",
    }


_META_HEADERS: Final[Json] = {
    "X-Nomad-Index": _ref("headers", "Index"),
    "X-Nomad-KnownLeader": _ref("headers", "KnownLeader"),
    "X-Nomad-LastContact": _ref("headers", "LastContact"),
}

_BLOCKING: Final = [_ref("parameters", "index"), _ref("parameters", "wait")]
_COMMON: Final = [
    _ref("parameters", "stale"),
    _ref("parameters", "region"),
    _ref("parameters", "pretty"),
]


def _ok(description: str, schema: Json, *, meta: bool, list_headers: bool = False) -> Json:
    response: Json = {
        "description": description,
        "content": {"application/json": {"schema": schema}},
    }
    headers = dict(_META_HEADERS) if meta else {}
    if list_headers:
        headers["X-Nomad-NextToken"] = _ref("headers", "NextToken")
        headers["X-Service-NextToken"] = _ref("headers", "NextToken")
    if headers:
        response["headers"] = headers
    return response


def _errors(*codes: str) -> Json:
    return {code: _ref("responses", f"Error{code}") for code in codes}


def _write(
    summary: str,
    description: str,
    parameters: list[Json],
    body: Json | None,
    answer: Json,
    *,
    methods: tuple[str, ...],
    index_header: bool = False,
    body_required: bool = False,
) -> Json:
    """One write operation, the same under each of its methods."""
    ok = _ok("Done", answer, meta=False)
    if index_header:
        ok["headers"] = {"X-Nomad-Index": _META_HEADERS["X-Nomad-Index"]}
    operation: Json = {
        "summary": summary,
        "description": description,
        "parameters": parameters,
        "responses": {"200": ok, **_errors("400", "403", "404", "405", "409", "500", "503")},
    }
    if body is not None:
        operation["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": body}},
        }
    return {method: operation for method in methods}


def _evaluation() -> Json:
    """Fields with zero values are left out, as in Nomad."""
    return {
        "type": "object",
        "properties": {
            "ID": _STRING,
            "Namespace": _STRING,
            "Priority": _INT,
            "Type": _STRING,
            "TriggeredBy": {
                "type": "string",
                "enum": ["job-register", "alloc-stop", "alloc-failure"],
            },
            "JobID": _STRING,
            "Status": {"type": "string", "enum": ["complete"]},
            "QueuedAllocations": {"type": "object", "additionalProperties": _INT},
            "CreateIndex": _INT,
            "ModifyIndex": _INT,
            "CreateTime": _NS_TIME,
            "ModifyTime": _NS_TIME,
        },
    }


def _task_state() -> Json:
    return {
        "type": "object",
        "properties": {
            "State": {"type": "string", "enum": ["pending", "running", "dead"]},
            "Failed": _BOOL,
            "Restarts": _INT,
            "LastRestart": {"type": "string", "format": "date-time", "nullable": True},
            "StartedAt": {"type": "string", "format": "date-time", "nullable": True},
            "FinishedAt": {"type": "string", "format": "date-time", "nullable": True},
            "TaskHandle": {"type": "object", "nullable": True},
            "Events": {"type": "array", "items": _ref("schemas", "TaskEvent"), "nullable": True},
        },
    }


def _task_event() -> Json:
    strings = [
        "Type", "DisplayMessage", "Message", "RestartReason", "SetupError", "DriverError",
        "DriverMessage", "KillError", "KillReason", "DownloadError", "ValidationError",
        "FailedSibling", "VaultError", "TaskSignalReason", "TaskSignal", "GenericSource",
    ]  # fmt: skip
    properties: Json = {name: _STRING for name in strings}
    properties.update(
        {
            "Time": _NS_TIME,
            "Details": {"type": "object", "additionalProperties": _STRING, "nullable": True},
            "FailsTask": _BOOL,
            "ExitCode": _INT,
            "Signal": _INT,
            "KillTimeout": _INT,
            "StartDelay": _INT,
            "DiskLimit": _INT,
        }
    )
    return {"type": "object", "properties": properties}


def _stub() -> Json:
    strings = [
        "ID", "EvalID", "FollowupEvalID", "Name", "Namespace", "NodeID", "NodeName", "JobID",
        "JobType", "TaskGroup", "PreemptedByAllocation", "NextAllocation", "ClientStatus",
        "ClientDescription", "DesiredStatus", "DesiredDescription",
    ]  # fmt: skip
    properties: Json = {name: _STRING for name in strings}
    properties.update(
        {
            "JobVersion": _INT,
            "CreateIndex": _INT,
            "ModifyIndex": _INT,
            "CreateTime": _NS_TIME,
            "ModifyTime": _NS_TIME,
            "DeploymentStatus": {
                "type": "object",
                "nullable": True,
                "properties": {
                    "Canary": _BOOL,
                    "Healthy": _NULLABLE_BOOL,
                    "ModifyIndex": _INT,
                    "Timestamp": {"type": "string", "format": "date-time"},
                },
            },
            "DesiredTransition": _ref("schemas", "DesiredTransition"),
            "PreemptedAllocations": {"type": "array", "items": _STRING, "nullable": True},
            "RescheduleTracker": _ref("schemas", "RescheduleTracker"),
            "TaskStates": {
                "type": "object",
                "nullable": True,
                "additionalProperties": _ref("schemas", "TaskState"),
            },
            "AllocatedResources": {**_ANY_OBJECT, "description": "Only with resources=true"},
        }
    )
    return {"type": "object", "properties": properties}


def _allocation() -> Json:
    strings = [
        "ID", "Namespace", "EvalID", "Name", "NodeID", "NodeName", "JobID", "TaskGroup",
        "DesiredStatus", "DesiredDescription", "ClientStatus", "ClientDescription",
        "PreviousAllocation", "NextAllocation", "DeploymentID", "FollowupEvalID",
        "PreemptedByAllocation",
    ]  # fmt: skip
    properties: Json = {name: _STRING for name in strings}
    properties.update(
        {
            "CreateIndex": _INT,
            "ModifyIndex": _INT,
            "AllocModifyIndex": _INT,
            "CreateTime": _NS_TIME,
            "ModifyTime": _NS_TIME,
            "Job": {
                **_ANY_OBJECT,
                "description": "The job as it was when the allocation was placed",
            },
            "Resources": _ref("schemas", "Resources"),
            "SharedResources": _ref("schemas", "Resources"),
            "TaskResources": {
                "type": "object",
                "additionalProperties": _ref("schemas", "Resources"),
            },
            "AllocatedResources": _ANY_OBJECT,
            "Metrics": _ANY_OBJECT,
            "DesiredTransition": _ref("schemas", "DesiredTransition"),
            "TaskStates": {"type": "object", "additionalProperties": _ref("schemas", "TaskState")},
            "DeploymentStatus": _ANY_OBJECT,
            "RescheduleTracker": _ref("schemas", "RescheduleTracker"),
            "PreemptedAllocations": {"type": "array", "items": _STRING},
        }
    )
    return {
        "type": "object",
        "description": "Zero-valued top-level fields are left out, as Nomad does.",
        "properties": properties,
    }


_JOB_STRINGS: Final = (
    "ID", "ParentID", "Name", "Namespace", "NodePool", "Type", "Status", "StatusDescription",
)  # fmt: skip


def _job_stub() -> Json:
    """A job derived from the allocations that name it (the read-only jobs view)."""
    counts = {
        name: _INT
        for name in ("Queued", "Complete", "Failed", "Running", "Starting", "Lost", "Unknown")
    }
    return {
        "type": "object",
        "properties": {
            **{name: _STRING for name in _JOB_STRINGS},
            "Datacenters": {"type": "array", "items": _STRING, "nullable": True},
            "Priority": _INT,
            "Periodic": _BOOL,
            "ParameterizedJob": _BOOL,
            "Stop": _BOOL,
            "Version": _INT,
            "CreateIndex": _INT,
            "ModifyIndex": _INT,
            "JobModifyIndex": _INT,
            "SubmitTime": _NS_TIME,
            "Meta": {"type": "object", "additionalProperties": _STRING},
            "JobSummary": {
                "type": "object",
                "properties": {
                    "JobID": _STRING,
                    "Namespace": _STRING,
                    "Summary": {
                        "type": "object",
                        "additionalProperties": {"type": "object", "properties": counts},
                    },
                    "CreateIndex": _INT,
                    "ModifyIndex": _INT,
                },
            },
        },
    }


def _alloc_usage() -> Json:
    """Nomad's AllocResourceUsage; `Measured` names the fields that hold measurements."""
    measured = {"type": "array", "items": _STRING, "nullable": True}
    number = {"type": "number"}
    usage = {
        "type": "object",
        "properties": {
            "MemoryStats": {
                "type": "object",
                "properties": {
                    **{name: _INT for name in ("RSS", "Cache", "Swap", "Usage", "MaxUsage")},
                    "KernelUsage": _INT,
                    "KernelMaxUsage": _INT,
                    "Measured": measured,
                },
            },
            "CpuStats": {
                "type": "object",
                "properties": {
                    **{n: number for n in ("SystemMode", "UserMode", "TotalTicks", "Percent")},
                    "ThrottledPeriods": _INT,
                    "ThrottledTime": _INT,
                    "Measured": measured,
                },
            },
            "DeviceStats": {"type": "array", "items": _ANY_OBJECT, "nullable": True},
        },
    }
    return {
        "type": "object",
        "properties": {
            "ResourceUsage": usage,
            "Tasks": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {
                        "ResourceUsage": usage,
                        "Timestamp": _NS_TIME,
                        "Pids": {"type": "object", "nullable": True},
                    },
                },
            },
            "Timestamp": _NS_TIME,
        },
    }


def _schemas() -> Json:
    return {
        "AllocationListStub": _stub(),
        "Allocation": _allocation(),
        "Evaluation": _evaluation(),
        "TaskState": _task_state(),
        "TaskEvent": _task_event(),
        "DesiredTransition": {
            "type": "object",
            "properties": {
                name: _NULLABLE_BOOL
                for name in (
                    "ForceReschedule",
                    "Migrate",
                    "MigrateDisablePlacement",
                    "NoShutdownDelay",
                    "Reschedule",
                )
            },
        },
        "RescheduleTracker": {
            "type": "object",
            "nullable": True,
            "properties": {
                "LastReschedule": _STRING,
                "Events": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "PrevAllocID": _STRING,
                            "PrevNodeID": _STRING,
                            "RescheduleTime": _NS_TIME,
                            "Delay": _INT,
                        },
                    },
                },
            },
        },
        "Resources": {
            "type": "object",
            "properties": {
                "CPU": _INT,
                "MemoryMB": _INT,
                "DiskMB": _INT,
                "Networks": {"type": "array", "items": _ANY_OBJECT, "nullable": True},
            },
        },
        "JobListStub": _job_stub(),
        "AllocResourceUsage": _alloc_usage(),
        "AllocFileInfo": {
            "type": "object",
            "properties": {
                "Name": _STRING,
                "IsDir": _BOOL,
                "Size": _INT,
                "FileMode": {**_STRING, "description": "Go's FileMode string, e.g. -rw-r--r--"},
                "ModTime": {**_STRING, "format": "date-time"},
                "ContentType": {**_STRING, "description": "Stat only"},
            },
        },
        "StreamFrame": {
            "type": "object",
            "description": "One of the frames written back to back; `{}` is a heartbeat",
            "properties": {
                "Offset": {**_INT, "description": "File offset just past Data"},
                "Data": {"type": "string", "format": "byte"},
                "File": {**_STRING, "description": "e.g. alloc/logs/web.stdout.0"},
                "FileEvent": _STRING,
            },
        },
        "ServiceRegistration": {
            "type": "object",
            "properties": {
                **{
                    name: _STRING
                    for name in (
                        "Address",
                        "AllocID",
                        "Datacenter",
                        "ID",
                        "JobID",
                        "Namespace",
                        "NodeID",
                        "ServiceName",
                    )
                },
                "CreateIndex": _INT,
                "ModifyIndex": _INT,
                "Port": _INT,
                "Tags": {"type": "array", "items": _STRING, "nullable": True},
            },
        },
        "CheckQueryResult": {
            "type": "object",
            "properties": {
                **{
                    name: _STRING
                    for name in ("Check", "Group", "ID", "Mode", "Output", "Service", "Task")
                },
                "Status": {"type": "string", "enum": ["success", "failure", "pending"]},
                "StatusCode": _INT,
                "Timestamp": {"type": "integer", "format": "int64", "description": "Unix seconds"},
            },
        },
    }


def _parameters() -> Json:
    ws_headers: dict[str, tuple[str, Json]] = {
        "connection": (
            "Connection",
            {
                "type": "string",
                "pattern": (
                    f"^(?:[^,]*,)*[ \\t]*{_ascii_case_insensitive('upgrade')}[ \\t]*(?:,.*)?$"
                ),
            },
        ),
        "upgrade": (
            "Upgrade",
            {"type": "string", "pattern": f"^{_ascii_case_insensitive('websocket')}$"},
        ),
        "ws_version": ("Sec-WebSocket-Version", {"type": "string", "enum": ["13"]}),
        "ws_key": (
            "Sec-WebSocket-Key",
            {"type": "string", "pattern": "^[A-Za-z0-9+/]{22}==$"},
        ),
    }
    return {
        "alloc_id": _param(
            "alloc_id", "path", _UUID, "The full 36-character allocation ID", required=True
        ),
        "index": _param(
            "index", "query", _UINT64, "Block until the index is above this one; 0 answers at once"
        ),
        "wait": _param(
            "wait",
            "query",
            _go_duration(),
            "Go duration to block for; default and maximum 5m (0 or negative: the default)",
        ),
        "stale": _param("stale", "query", _GO_BOOL, "Accepted; every replica answers"),
        "region": _param("region", "query", _STRING, "Accepted and ignored"),
        "pretty": _param("pretty", "query", _STRING, "Indent the JSON body (any value but `0`)"),
        "namespace": _param(
            "namespace", "query", {"type": "string", "default": "default"}, "`*` for all"
        ),
        "prefix": _param("prefix", "query", _ID_PREFIX, "Even number of hex digits; sorts by ID"),
        "filter": _param(
            "filter",
            "query",
            {"type": "string", "format": "go-bexpr"},
            "go-bexpr filter on the full allocation (the job stub for /v1/jobs); empty: none. "
            "A syntax error, or a selector that fails on a listed item, is 400",
        ),
        "per_page": _param(
            "per_page",
            "query",
            _INT32,
            "Page size; 0 means no limit. As in Nomad, a negative size is taken and gives an "
            "empty page whose next token names the first match",
        ),
        "next_token": _param("next_token", "query", _STRING, "Token naming the next page"),
        "reverse": _param("reverse", "query", _STRING, "Exactly `true` reverses the order"),
        "resources": _param("resources", "query", _GO_BOOL, "Include AllocatedResources"),
        "task_states": _param("task_states", "query", _GO_BOOL, "Include TaskStates (default)"),
        "no_shutdown_delay": _param(
            "no_shutdown_delay", "query", _GO_BOOL, "Skip the group and task shutdown delay"
        ),
        "reschedule": _param(
            "reschedule", "query", _GO_BOOL, "Accepted; a stop always reschedules"
        ),
        "task": _param("task", "query", _NAME, "Task name", required=True),
        "command": {
            "name": "command",
            "in": "query",
            "required": True,
            "description": 'The command and its arguments, e.g. `["sh","-c","ls"]`',
            "content": {
                "application/json": {"schema": {"type": "array", "items": _STRING, "minItems": 1}}
            },
        },
        "tty": _param("tty", "query", _GO_BOOL, "Allocate a terminal (stderr then joins stdout)"),
        "ws_handshake": _param(
            "ws_handshake",
            "query",
            _GO_BOOL,
            'The first frame is `{"version":1,"auth_token":"..."}` and carries the token',
        ),
        **{
            key: _param(name, "header", schema, "WebSocket upgrade (RFC 6455)", required=True)
            for key, (name, schema) in ws_headers.items()
        },
        "node_id": _param("node_id", "path", _STRING, "A node ID", required=True),
        "job_id": _param("job_id", "path", _STRING, "A job ID", required=True),
        "only_task": _param("task", "query", _STRING, "Only this task (all when empty)"),
        "log_type": _param(
            "type",
            "query",
            {"type": "string", "enum": ["stdout", "stderr"]},
            "Which log",
            required=True,
        ),
        "follow": _param("follow", "query", _GO_BOOL, "Keep streaming what the task writes"),
        "plain": _param("plain", "query", _GO_BOOL, "Raw bytes as text/plain, no frames"),
        "offset": _param(
            "offset",
            "query",
            {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
            "Bytes to skip, or from the end to show",
        ),
        "origin": _param(
            "origin",
            "query",
            {"type": "string", "enum": ["", "start", "end"], "default": "start"},
            "Where `offset` counts from",
        ),
        "eval_id": _param("eval_id", "path", _UUID, "A full evaluation ID", required=True),
        "fs_path": _param(
            "path", "query", _NAME, "Path in the allocation directory", required=True
        ),
        "fs_dir": _param(
            "path", "query", _STRING, "Directory in the allocation directory (default `/`)"
        ),
        "fs_offset": _param(
            "offset",
            "query",
            {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
            "Bytes to skip (from the start, or for `origin=end` back from the end)",
        ),
        "fs_limit": _param(
            "limit",
            "query",
            {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
            "Most bytes to read (0 or negative: to the end)",
        ),
        "fs_follow": _param(
            "follow", "query", _GO_BOOL, "Keep streaming what is appended (default true)"
        ),
    }


def _responses() -> Json:
    text = {"text/plain": {"schema": _STRING}}
    responses: Json = {
        f"Error{code}": {"description": description, "content": text}
        for code, description in (
            ("400", "Bad input; the body is Nomad's error text"),
            ("403", "`Permission denied`"),
            ("404", "Unknown allocation, evaluation or resource"),
            ("405", "`Invalid method`"),
            ("409", "The allocation or task is not in a state that allows this"),
            ("500", "The action could not be carried out (the text says why)"),
            ("503", "The replica has not loaded the allocations yet"),
        )
    }
    responses["Error405"]["headers"] = {"Allow": _ref("headers", "Allow")}
    return responses


def _headers() -> Json:
    return {
        "Index": {"schema": _STRING, "description": "Index for blocking queries (>= 1)"},
        "KnownLeader": {"schema": _STRING, "description": "Always `true`"},
        "LastContact": {"schema": _STRING, "description": "Milliseconds; always `0`"},
        "NextToken": {"schema": _STRING, "description": "The next page's token, when there is one"},
        "Allow": {
            "schema": _STRING,
            "required": True,
            "description": "The methods the path takes, e.g. `POST, PUT` (RFC 9110)",
        },
    }


def _exec() -> Json:
    frames = (
        "WebSocket of JSON text frames. Client: `{stdin:{data:<base64>}}`, "
        "`{stdin:{close:true}}`, `{tty_size:{height,width}}`, heartbeat `{}`. Server: "
        "`{stdout|stderr:{data:<base64>}}` (at most 32 KiB raw each), `{stdout|stderr:"
        "{close:true}}`, then `{exited:true,result:{exit_code:N}}` and a normal close; "
        "heartbeats `{}`. Errors after the upgrade are close frames with the error text as the "
        "reason: 1008 for bad requests, denials, unknown allocations or tasks and tasks that "
        "are not running; 1011 for internal faults."
    )
    return {
        "get": {
            "summary": "Run a command in a task's container (WebSocket)",
            "description": (
                "ACL: alloc-exec, plus alloc-node-exec for raw_exec tasks. Not blocking. A GET "
                "without the upgrade headers is 400; a cross-origin `Origin` is 403. " + frames
            ),
            "parameters": [
                _ref("parameters", "alloc_id"),
                _ref("parameters", "task"),
                _ref("parameters", "command"),
                _ref("parameters", "tty"),
                _ref("parameters", "ws_handshake"),
                _ref("parameters", "namespace"),
                *(
                    _ref("parameters", name)
                    for name in ("connection", "upgrade", "ws_version", "ws_key")
                ),
            ],
            "responses": {
                "101": {
                    "description": (
                        "Switching to the WebSocket protocol. The query parameters are checked "
                        "after the upgrade: a bad one ends the session with a 1008 close frame"
                    )
                },
                **_errors("400", "403", "405"),
            },
        }
    }


def _fs_paths() -> Json:
    """`alloc fs`: read inside the task's container (docs/nomad-cli.md has the mapping)."""
    acl = (
        "ACL: read-fs. Not blocking. Read inside the task's container (alloc/ in a running "
        "task's); 409 when it is not running. "
    )
    common = [_ref("parameters", "namespace")]
    raw = {
        "description": "The file's bytes",
        "content": {
            "text/plain": {"schema": _STRING},
            "application/octet-stream": {"schema": _STRING},
        },
    }
    info = _ref("schemas", "AllocFileInfo")
    errors = _errors("400", "403", "404", "405", "409", "500", "503")

    def get(summary: str, description: str, params: list[str], ok: Json) -> Json:
        parameters = [_ref("parameters", "alloc_id"), *(_ref("parameters", p) for p in params)]
        return {
            "get": {
                "summary": summary,
                "description": acl + description,
                "parameters": [*parameters, *common],
                "responses": {"200": ok, **errors},
            }
        }

    return {
        "/v1/client/fs/stat/{alloc_id}": get(
            "Stat a path of the allocation directory",
            "404 for a missing path; 400 for a path escaping the directory.",
            ["fs_path", "pretty"],
            _ok("AllocFileInfo", info, meta=False),
        ),
        "/v1/client/fs/ls/{alloc_id}": get(
            "List a directory of the allocation directory",
            "Entries as lstat sees them (a symlink is listed as one).",
            ["fs_dir", "pretty"],
            _ok("AllocFileInfo list", {"type": "array", "items": info}, meta=False),
        ),
        "/v1/client/fs/cat/{alloc_id}": get(
            "Read a whole file", "403 under <task>/secrets.", ["fs_path"], raw
        ),
        "/v1/client/fs/readat/{alloc_id}": get(
            "Read `limit` bytes of a file from `offset`",
            "403 under <task>/secrets.",
            ["fs_path", "fs_offset", "fs_limit"],
            raw,
        ),
        "/v1/client/fs/stream/{alloc_id}": get(
            "Stream a file as Nomad's frames, following it by default",
            "JSON StreamFrame objects back to back (`File` is the path as asked), `{}` "
            "heartbeats each second while a followed file is idle.",
            ["fs_path", "fs_follow", "fs_offset", "origin"],
            {
                "description": "Frames",
                "content": {"application/json": {"schema": _ref("schemas", "StreamFrame")}},
            },
        ),
    }


def _paths() -> Json:
    alloc_id = [_ref("parameters", "alloc_id")]
    checks = {
        "get": {
            "summary": "Read the allocation's health check results",
            "description": "ACL: namespace read-job. Not blocking.",
            "parameters": [*alloc_id, _ref("parameters", "namespace"), *_COMMON],
            "responses": {
                "200": _ok(
                    "Check ID to latest result",
                    {"type": "object", "additionalProperties": _ref("schemas", "CheckQueryResult")},
                    meta=False,
                ),
                **_errors("400", "403", "404", "405", "503"),
            },
        }
    }
    return {
        "/v1/allocations": {
            "get": {
                "summary": "List allocations",
                "description": "ACL: namespace read-job. Blocking: yes.",
                "parameters": [
                    _ref("parameters", name)
                    for name in (
                        "namespace",
                        "prefix",
                        "filter",
                        "per_page",
                        "next_token",
                        "reverse",
                        "resources",
                        "task_states",
                    )
                ]
                + _BLOCKING
                + _COMMON,
                "responses": {
                    "200": _ok(
                        "Allocation stubs",
                        {"type": "array", "items": _ref("schemas", "AllocationListStub")},
                        meta=True,
                        list_headers=True,
                    ),
                    **_errors("400", "403", "405", "503"),
                },
            }
        },
        "/v1/allocation/{alloc_id}": {
            "get": {
                "summary": "Read an allocation",
                "description": "ACL: namespace read-job. Blocking: yes.",
                "parameters": [*alloc_id, _ref("parameters", "namespace"), *_BLOCKING, *_COMMON],
                "responses": {
                    "200": _ok("The allocation", _ref("schemas", "Allocation"), meta=True),
                    **_errors("400", "403", "404", "405", "503"),
                },
            }
        },
        "/v1/allocation/{alloc_id}/services": {
            "get": {
                "summary": "Read the allocation's service registrations",
                "description": "ACL: read-job on the request namespace. Blocking: yes.",
                "parameters": [*alloc_id, _ref("parameters", "namespace"), *_BLOCKING, *_COMMON],
                "responses": {
                    "200": _ok(
                        "Service registrations",
                        {"type": "array", "items": _ref("schemas", "ServiceRegistration")},
                        meta=True,
                    ),
                    **_errors("400", "403", "404", "405", "503"),
                },
            }
        },
        "/v1/allocation/{alloc_id}/stop": _write(
            "Stop the allocation and reschedule it",
            "ACL: alloc-lifecycle. Creates a linked replacement allocation.",
            [*alloc_id, _ref("parameters", "no_shutdown_delay"), _ref("parameters", "reschedule")],
            None,
            {
                "type": "object",
                "properties": {"EvalID": _STRING, "Index": _INT},
            },
            methods=("post", "put"),
            index_header=True,
        ),
        "/v1/client/allocation/{alloc_id}/signal": _write(
            "Send a signal to one task or every running task",
            "ACL: alloc-lifecycle.",
            alloc_id,
            {
                "type": "object",
                "description": "Keys match case-insensitively, as Go decodes them",
                "required": ["Signal"],
                "properties": {
                    "Signal": _signal(),
                    "Task": {**_STRING, "description": "Empty: every running task"},
                },
            },
            {"type": "object"},
            methods=("post", "put"),
            body_required=True,
        ),
        "/v1/client/allocation/{alloc_id}/restart": _write(
            "Restart a task, the running tasks, or all tasks in place",
            "ACL: alloc-lifecycle. TaskName and AllTasks=true exclude each other.",
            alloc_id,
            {
                "type": "object",
                "description": "Keys match case-insensitively, as Go decodes them",
                "properties": {"TaskName": _STRING, "AllTasks": _BOOL},
                "not": {
                    "required": ["TaskName", "AllTasks"],
                    "properties": {"TaskName": _NAME, "AllTasks": {"enum": [True]}},
                },
            },
            {"type": "object"},
            methods=("get", "post", "put"),
        ),
        "/v1/client/allocation/{alloc_id}/pause": {
            "get": {
                "summary": "Read a task's pause schedule state",
                "description": "ACL: read-job.",
                "parameters": [*alloc_id, _ref("parameters", "task")],
                "responses": {
                    "200": _ok(
                        "The state",
                        {"type": "object", "properties": {"ScheduleState": _STRING}},
                        meta=False,
                    ),
                    **_errors("400", "403", "404", "405", "503"),
                },
            },
            **_write(
                "Override a task's pause schedule",
                "ACL: job-submit. ScheduleState: pause, run or scheduled.",
                alloc_id,
                {
                    "type": "object",
                    "description": "Keys match case-insensitively, as Go decodes them",
                    "required": ["ScheduleState", "Task"],
                    "properties": {
                        "Task": _NAME,
                        "ScheduleState": {"type": "string", "enum": ["pause", "run", "scheduled"]},
                    },
                },
                {"type": "object", "properties": {"Index": _INT}},
                methods=("post", "put"),
                body_required=True,
            ),
        },
        "/v1/allocation/{alloc_id}/checks": checks,
        "/v1/client/allocation/{alloc_id}/checks": checks,
        "/v1/client/allocation/{alloc_id}/exec": _exec(),
        "/v1/evaluation/{eval_id}": {
            "get": {
                "summary": "Read the evaluation that placed allocations (what the CLI follows)",
                "description": (
                    "ACL: read-job on the evaluation's namespace. Blocking: yes. Derived from "
                    "the allocations it placed; always complete."
                ),
                "parameters": [
                    _ref("parameters", "eval_id"),
                    _ref("parameters", "namespace"),
                    *_BLOCKING,
                    *_COMMON,
                ],
                "responses": {
                    "200": _ok("The evaluation", _ref("schemas", "Evaluation"), meta=True),
                    **_errors("400", "403", "404", "405", "503"),
                },
            }
        },
        "/v1/evaluation/{eval_id}/allocations": {
            "get": {
                "summary": "List the allocations the evaluation placed",
                "description": "ACL: read-job on the evaluation's namespace. Blocking: yes.",
                "parameters": [
                    _ref("parameters", "eval_id"),
                    _ref("parameters", "namespace"),
                    *_BLOCKING,
                    *_COMMON,
                ],
                "responses": {
                    "200": _ok(
                        "Allocation stubs ([] for an unknown evaluation)",
                        {"type": "array", "items": _ref("schemas", "AllocationListStub")},
                        meta=True,
                    ),
                    **_errors("400", "403", "405", "503"),
                },
            }
        },
        "/v1/client/allocation/{alloc_id}/stats": {
            "get": {
                "summary": "Read the tasks' CPU and memory usage (the kubelet's summary stats)",
                "description": (
                    "ACL: namespace read-job. Not blocking. 501 when the node serves no stats "
                    "(kwok), 503 when the allocation is not on a node or its node cannot be read."
                ),
                "parameters": [
                    _ref("parameters", "alloc_id"),
                    _ref("parameters", "only_task"),
                    _ref("parameters", "namespace"),
                    _ref("parameters", "pretty"),
                ],
                "responses": {
                    "200": _ok(
                        "AllocResourceUsage", _ref("schemas", "AllocResourceUsage"), meta=False
                    ),
                    **_errors("400", "403", "404", "405", "500", "503"),
                    "501": {
                        "description": "The node serves no resource stats",
                        "content": {"text/plain": {"schema": _STRING}},
                    },
                },
            }
        },
        "/v1/client/fs/logs/{alloc_id}": {
            "get": {
                "summary": "Stream a task's log (its container's Kubernetes log)",
                "description": (
                    "ACL: read-logs or read-fs. Not blocking. The body is Nomad's frame stream: "
                    "JSON StreamFrame objects back to back (`Offset`, `Data` base64, `File`, "
                    "`FileEvent`, empty ones left out), `{}` heartbeats each second while a "
                    "followed log is idle; with `plain=true` the raw bytes. Without split "
                    "streams on the API server, `type=stdout` is the whole log and "
                    "`type=stderr` empty (docs/nomad-cli.md)."
                ),
                "parameters": [
                    _ref("parameters", "alloc_id"),
                    *(
                        _ref("parameters", name)
                        for name in ("task", "log_type", "follow", "plain", "offset", "origin")
                    ),
                    _ref("parameters", "namespace"),
                ],
                "responses": {
                    "200": {
                        "description": "Frames (application/json) or the log (text/plain)",
                        "content": {
                            "application/json": {"schema": _ref("schemas", "StreamFrame")},
                            "text/plain": {"schema": _STRING},
                        },
                    },
                    **_errors("400", "403", "404", "405", "500", "503"),
                },
            }
        },
        **_fs_paths(),
        "/v1/jobs": {
            "get": {
                "summary": "List the jobs named by allocations (read only; the CLI's -job forms)",
                "description": (
                    "ACL: namespace read-job. Blocking: yes. Ordered by namespace, then job ID; "
                    "`prefix` matches job IDs; the page token is `<namespace>.<job ID>`."
                ),
                "parameters": [
                    _ref("parameters", name)
                    for name in ("namespace", "filter", "per_page", "next_token", "reverse")
                ]
                + [_param("prefix", "query", _STRING, "Job ID prefix")]
                + _BLOCKING
                + _COMMON,
                "responses": {
                    "200": _ok(
                        "Job stubs",
                        {"type": "array", "items": _ref("schemas", "JobListStub")},
                        meta=True,
                        list_headers=True,
                    ),
                    **_errors("400", "403", "405", "503"),
                },
            }
        },
        "/v1/job/{job_id}/allocations": {
            "get": {
                "summary": "List a job's allocations ([] for a job no allocation names)",
                "description": "ACL: namespace read-job. Blocking: yes.",
                "parameters": [
                    _ref("parameters", "job_id"),
                    _ref("parameters", "namespace"),
                    *_BLOCKING,
                    *_COMMON,
                ],
                "responses": {
                    "200": _ok(
                        "Allocation stubs",
                        {"type": "array", "items": _ref("schemas", "AllocationListStub")},
                        meta=True,
                    ),
                    **_errors("400", "403", "405", "503"),
                },
            }
        },
        "/v1/node/{node_id}": {
            "get": {
                "summary": "Read a node: always 404 `node not found` (no nodes API is served)",
                "description": (
                    "The Go client reads the allocation's node before exec and, on a 404, "
                    "connects to the API address it was given."
                ),
                "parameters": [_ref("parameters", "node_id")],
                "responses": _errors("404", "405"),
            }
        },
        "/v1/openapi.json": {
            "get": {
                "summary": "This document",
                "parameters": [_ref("parameters", "pretty")],
                "responses": {"200": _ok("OpenAPI 3 document", _ANY_OBJECT, meta=False)},
            }
        },
    }


DOCUMENT: Final[Json] = {
    "openapi": "3.0.3",
    "info": {
        "title": "allocbridge allocations API",
        "version": "1",
        "description": (
            "Nomad-compatible allocations API served over Kubernetes. Tokens: `X-Nomad-Token` "
            "or `Authorization: Bearer`. Errors are plain text with Nomad's messages."
        ),
    },
    "paths": _paths(),
    "components": {
        "schemas": _schemas(),
        "parameters": _parameters(),
        "responses": _responses(),
        "headers": _headers(),
        "securitySchemes": {
            "nomadToken": {"type": "apiKey", "in": "header", "name": "X-Nomad-Token"},
            "bearer": {"type": "http", "scheme": "bearer"},
        },
    },
    "security": [{}, {"nomadToken": []}, {"bearer": []}],
}

_COMPACT: Final = encoding.compact(DOCUMENT)


async def openapi_document(request: web.Request) -> Answer:
    return Answer(DOCUMENT, encoded=_COMPACT)


ENDPOINTS = [Endpoint("/v1/openapi.json", {"GET": openapi_document})]
