"""Authorization end to end: Kubernetes tokens and RBAC deciding Nomad ACL capabilities.

Two `allocbridge run` processes of this module's own, under the shipped operator
ServiceAccount, each limited by `kubernetes { namespaces = [...] }` to namespaces this module
creates, so each namespace has exactly one reconciler and no other test's objects are touched:

- `acl`: `acl { enabled = true }`, watching namespaces A, B and QUIET (QUIET has no
  allocations: a grant there lets `namespace=*` answer `[]`);
- `open`: `acl { enabled = false }`, watching namespace D only.

The module does not use the session `operator` fixture, so run on its own there is exactly
one reconciler per namespace. (In a full run the session operator, which watches every
namespace, may be up too and reconcile A, B and D as well; reconciliation is level-triggered
and idempotent, and these tests assert only authorization outcomes.)

Users are ServiceAccounts with `kubectl create token` tokens, bound through RoleBindings in A
(namespace-scoped) or a ClusterRoleBinding (cluster-wide). "Expired" is played by a token
whose ServiceAccount was deleted: it stops authenticating just as an expired one does, without
waiting out the API server's 10-minute minimum token lifetime.

The capability table is driven by the router: the routes come from the running process's
`/v1/openapi.json` (which a unit test keeps equal to the router), every routed endpoint must
have a row, and rows whose endpoint is not routed yet are skipped with the reason printed.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import nomad
import pytest
import yaml
from nomad.api.exceptions import URLNotAuthorizedNomadException
from running_operator import (
    REPO,
    Operator,
    http,
    install,
    service_account_kubeconfig,
)

from allocbridge.auth import ALL_NAMESPACES, Caller, PermissionDeniedError
from allocbridge.auth.kubernetes import KubernetesAuthorizer
from allocbridge.cluster.connection import load_credentials
from allocbridge.config import KubernetesSettings
from allocbridge.model.wire import eval_id
from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster

CAPABILITIES = ("read-job", "alloc-lifecycle", "alloc-exec", "alloc-node-exec", "job-submit")
READ_CAPABILITIES = ("read-logs", "read-fs")
#: Users of the table: one per capability, one with exec into raw_exec tasks, one with nothing.
TABLE_USERS: dict[str, frozenset[str]] = {
    **{f"cap-{cap}": frozenset({cap}) for cap in (*CAPABILITIES, *READ_CAPABILITIES)},
    "exec-node": frozenset({"alloc-exec", "alloc-node-exec"}),
    "nothing": frozenset(),
}
#: The allocations every watched namespace of the table gets (name -> driver of task `main`).
TABLE_ALLOCS = {
    "web": "docker",
    "raw": "raw_exec",
    "stopme": "docker",
    "sig": "docker",
    "rst": "docker",
    "pause": "docker",
}
TASK = "main"
SHIPPED_ROLES = {
    "allocbridge-reader": {"read-job", *READ_CAPABILITIES},
    "allocbridge-operator": {"read-job", *READ_CAPABILITIES, "alloc-lifecycle", "alloc-exec"},
    "allocbridge-admin": {*CAPABILITIES, *READ_CAPABILITIES},
}


# -- HTTP --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    base: str,
    path: str,
    *,
    method: str = "GET",
    token: str | None = None,
    source: str = "X-Nomad-Token",
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """One request; `source` says where the token goes (`X-Nomad-Token` or `Bearer`)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, method=method, data=data)
    if token is not None:
        if source == "X-Nomad-Token":
            request.add_header("X-Nomad-Token", token)
        else:
            request.add_header("Authorization", f"{source} {token}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return Reply(response.status, response.read())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.read())


def denied(reply: Reply) -> bool:
    return reply.status == 403 and reply.body == b"Permission denied"


# -- the world: namespaces, users, allocations, two operators ----------------------------------


@dataclass
class World:
    kubectl: Any
    acl: Operator
    open: Operator
    a: str
    b: str
    quiet: str
    d: str
    tokens: dict[str, str] = field(default_factory=dict)
    ids: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, name) -> uid
    cluster_objects: list[str] = field(default_factory=list)  # kind/name to delete at the end
    sa_kubeconfig: Path | None = None

    def token(self, user: str, namespace: str | None = None) -> str:
        return self.tokens[user] if namespace is None else self.tokens[f"{namespace}/{user}"]


def alloc_manifest(namespace: str, name: str, driver: str) -> dict[str, Any]:
    config: dict[str, Any] = (
        {"image": "busybox"}
        if driver == "docker"
        else {"command": "/bin/sh", "args": ["-c", "while true; do sleep 10; done"]}
    )
    return {
        "apiVersion": "allocbridge.io/v1",
        "kind": "Allocation",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "job": {"id": name, "type": "service"},
            "taskGroup": {"name": "g"},
            "tasks": [{"name": TASK, "driver": driver, "config": config}],
        },
    }


def create_token(kubectl: Any, namespace: str, account: str) -> str:
    out: str = kubectl("create", "token", account, "-n", namespace, "--duration=2h").stdout
    return out.strip()


def can_i(kubectl: Any, subject: str, verb: str, namespace: str) -> bool:
    done = kubectl(
        "auth",
        "can-i",
        verb,
        "allocations.allocbridge.io",
        "-n",
        namespace,
        f"--as={subject}",
        check=False,
    )
    return bool(done.stdout.strip() == "yes")


def wait_namespace(kubectl: Any, name: str) -> None:
    eventually(
        lambda: (
            kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0
        ),
        what=f"namespace {name} to get its default ServiceAccount",
    )


@pytest.fixture(scope="module")
def world(cluster: Any, kubectl: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    install(kubectl)
    kubectl("apply", "-f", str(REPO / "manifests" / "roles.yaml"))
    suffix = uuid.uuid4().hex[:6]
    a, b, quiet, d = (f"auth-{n}-{suffix}" for n in ("a", "b", "quiet", "d"))
    folder = tmp_path_factory.mktemp("auth")
    sa_kubeconfig = service_account_kubeconfig(kubectl, cluster.kubeconfig, folder / "kubeconfig")
    acl_dir, open_dir = folder / "acl", folder / "open"
    acl_dir.mkdir()
    open_dir.mkdir()
    acl = Operator(acl_dir, sa_kubeconfig, acl=True, namespaces=(a, b, quiet))
    opened = Operator(open_dir, sa_kubeconfig, acl=False, namespaces=(d,))
    w = World(kubectl, acl, opened, a, b, quiet, d, sa_kubeconfig=sa_kubeconfig)
    try:
        for ns in (a, b, quiet, d):
            kubectl("create", "namespace", ns)
        for ns in (a, b, d):
            wait_namespace(kubectl, ns)
        _users_and_bindings(w, suffix)
        acl.start()
        opened.start()
        log = folder / "web.log"  # kwok serves it as the log of `web`'s task (its Logs object)
        log.write_text("2026-11-25T12:00:00.000000000Z stdout F hello\n")
        for ns in (a, d):
            for name, driver in TABLE_ALLOCS.items():
                kubectl.apply(alloc_manifest(ns, name, driver))
            kubectl.apply(
                {
                    "apiVersion": "kwok.x-k8s.io/v1alpha1",
                    "kind": "Logs",
                    "metadata": {"name": "web", "namespace": ns},
                    "spec": {"logs": [{"containers": [TASK], "logsFile": str(log)}]},
                }
            )
        kubectl.apply(alloc_manifest(b, "web-b", "docker"))
        for ns, names in ((a, list(TABLE_ALLOCS)), (d, list(TABLE_ALLOCS)), (b, ["web-b"])):
            for name in names:
                w.ids[(ns, name)] = _running(w, ns, name)
        yield w
    finally:
        acl.stop()
        opened.stop()
        for ns in (a, b, quiet, d):
            kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        for obj in w.cluster_objects:
            kubectl("delete", obj, "--ignore-not-found", check=False)


def _users_and_bindings(w: World, suffix: str) -> None:
    """ServiceAccounts in A, their bindings, their tokens; waits until RBAC says yes."""
    k, a = w.kubectl, w.a
    expect: list[tuple[str, str, str]] = []  # (subject, verb, namespace) that must be allowed

    def account(name: str, namespace: str = a) -> str:
        k("create", "serviceaccount", name, "-n", namespace)
        w.tokens[name if namespace == a else f"{namespace}/{name}"] = create_token(
            k, namespace, name
        )
        return f"system:serviceaccount:{namespace}:{name}"

    for cap in (*CAPABILITIES, *READ_CAPABILITIES):
        role = f"allocbridge-test-{cap}-{suffix}"
        # Applied, not `kubectl create clusterrole`: kubectl refuses verbs it does not know.
        k.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": [
                    {"apiGroups": ["allocbridge.io"], "resources": ["allocations"], "verbs": [cap]}
                ],
            }
        )
        w.cluster_objects.append(f"clusterrole/{role}")
    for user, caps in TABLE_USERS.items():
        subject = account(user)
        for cap in caps:
            k(
                "create",
                "rolebinding",
                f"{user}-{cap}",
                f"--clusterrole=allocbridge-test-{cap}-{suffix}",
                f"--serviceaccount={a}:{user}",
                "-n",
                a,
            )
            expect.append((subject, cap, a))
    # The shipped roles: namespace-scoped in A or QUIET, cluster-wide for the admin.
    for user, role, namespace in (
        ("reader-a", "allocbridge-reader", a),
        ("reader-quiet", "allocbridge-reader", w.quiet),
        ("doomed", "allocbridge-reader", a),
        ("role-reader", "allocbridge-reader", a),
        ("role-operator", "allocbridge-operator", a),
        ("role-admin", "allocbridge-admin", a),
    ):
        subject = account(user)
        k(
            "create",
            "rolebinding",
            user,
            f"--clusterrole={role}",
            f"--serviceaccount={a}:{user}",
            "-n",
            namespace,
        )
        expect.append((subject, "read-job", namespace))
    subject = account("admin")
    binding = f"allocbridge-test-admin-{suffix}"
    k(
        "create",
        "clusterrolebinding",
        binding,
        "--clusterrole=allocbridge-admin",
        f"--serviceaccount={a}:admin",
    )
    w.cluster_objects.append(f"clusterrolebinding/{binding}")
    expect.append((subject, "read-job", w.b))
    account("nobody")
    for subject, verb, namespace in expect:
        eventually(
            partial(can_i, k, subject, verb, namespace),
            timeout=60,
            what=f"RBAC to let {subject} {verb} in {namespace}",
        )


def _running(w: World, namespace: str, name: str) -> str:
    """Wait until the allocation runs and its operator serves it; return its ID."""

    def status() -> Any:
        found = w.kubectl.json("get", "allocation", name, "-n", namespace)
        state = found.get("status") or {}
        return state.get("clientStatus") == "running" and found["metadata"]["uid"]

    uid: str = eventually(status, timeout=120, what=f"{namespace}/{name} to run")
    server, token = (w.open, None) if namespace == w.d else (w.acl, w.token("admin"))
    eventually(
        lambda: call(server.api, f"/v1/allocation/{uid}", token=token).status == 200,
        timeout=60,
        what=f"{namespace}/{name} in the API's store",
    )
    return uid


@pytest.fixture(scope="module")
def routes(world: World) -> set[tuple[str, str]]:
    """(OpenAPI path, METHOD) of every endpoint the ACL process serves."""
    document = call(world.acl.api, "/v1/openapi.json").json()
    return {
        (path, method.upper())
        for path, operations in document["paths"].items()
        for method in operations
        if method.upper() in {"GET", "PUT", "POST", "DELETE", "PATCH", "HEAD"}
    }


# -- the capability table ----------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One endpoint and method, the capabilities it needs, and a request that should succeed."""

    path: str
    method: str
    needs: frozenset[str] | None  # None: public
    alloc: str = "web"
    query: str = ""
    body: Any = None
    reads: bool = True  # a read: allowed means `expect` (writes: anything but 403 and 5xx)
    expect: int = 200
    any_of: bool = False  # `needs` lists alternatives (logs: read-logs or read-fs)

    def allows(self, caps: frozenset[str]) -> bool:
        if self.needs is None:
            return True
        return bool(self.needs & caps) if self.any_of else self.needs <= caps

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}" + ("" if self.alloc == "web" else f" ({self.alloc})")

    def url(self, alloc_id: str, namespace: str) -> str:
        path = (
            self.path.replace("{alloc_id}", alloc_id)
            .replace("{eval_id}", eval_id(alloc_id))  # the evaluation that placed it
            .replace("{node_id}", UNKNOWN_NODE)
            .replace("{job_id}", self.alloc)  # the table's allocations name jobs after themselves
        )
        query = self.query.replace("{ns}", namespace)
        return path + (f"?{query}" if query else "")


READ = frozenset({"read-job"})
UNKNOWN_NODE = str(uuid.UUID(int=7))
LIFECYCLE = frozenset({"alloc-lifecycle"})
READ_FS = frozenset({"read-fs"})
EXEC = frozenset({"alloc-exec"})
NODE_EXEC = frozenset({"alloc-exec", "alloc-node-exec"})
EXEC_PATH = "/v1/client/allocation/{alloc_id}/exec"
EXEC_QUERY = "task=" + TASK + "&command=" + urllib.parse.quote('["echo","hello"]')

ROWS = [
    Row("/v1/allocations", "GET", READ, query="namespace={ns}"),
    Row("/v1/allocation/{alloc_id}", "GET", READ),
    Row("/v1/allocation/{alloc_id}/services", "GET", READ, query="namespace={ns}"),
    Row("/v1/allocation/{alloc_id}/checks", "GET", READ),
    Row("/v1/client/allocation/{alloc_id}/checks", "GET", READ),
    Row("/v1/evaluation/{eval_id}", "GET", READ),
    Row("/v1/evaluation/{eval_id}/allocations", "GET", READ),
    Row("/v1/openapi.json", "GET", None),
    Row("/v1/jobs", "GET", READ, query="namespace={ns}"),
    Row("/v1/job/{job_id}/allocations", "GET", READ, query="namespace={ns}"),
    # kwok's node serves no stats: an allowed caller gets the 501 that says so.
    Row("/v1/client/allocation/{alloc_id}/stats", "GET", READ, expect=501),
    Row(
        "/v1/client/fs/logs/{alloc_id}",
        "GET",
        frozenset(READ_CAPABILITIES),
        query=f"task={TASK}&type=stdout&plain=true",
        any_of=True,
    ),
    # `alloc fs` needs read-fs. The allocation directory's root is made up (no container is
    # read), so stat and ls of it answer 200 on kwok too; reading it is the 400 for a directory,
    # which comes after the capability check, as Nomad's order has it.
    Row("/v1/client/fs/stat/{alloc_id}", "GET", READ_FS, query="path=/"),
    Row("/v1/client/fs/ls/{alloc_id}", "GET", READ_FS, query="path=/"),
    Row("/v1/client/fs/cat/{alloc_id}", "GET", READ_FS, query="path=/", expect=400),
    Row("/v1/client/fs/readat/{alloc_id}", "GET", READ_FS, query="path=/&offset=0", expect=400),
    Row("/v1/client/fs/stream/{alloc_id}", "GET", READ_FS, query="path=/", expect=400),
    # A stub for the Go client's exec (always `node not found`): public, it reveals nothing.
    Row("/v1/node/{node_id}", "GET", None, expect=404),
    *(
        Row("/v1/allocation/{alloc_id}/stop", m, LIFECYCLE, alloc="stopme", reads=False)
        for m in ("POST", "PUT")
    ),
    *(
        Row(
            "/v1/client/allocation/{alloc_id}/signal",
            m,
            LIFECYCLE,
            alloc="sig",
            body={"Signal": "SIGUSR1", "Task": TASK},
            reads=False,
        )
        for m in ("POST", "PUT")
    ),
    *(
        Row("/v1/client/allocation/{alloc_id}/restart", m, LIFECYCLE, alloc="rst", reads=False)
        for m in ("GET", "POST", "PUT")
    ),
    Row("/v1/client/allocation/{alloc_id}/pause", "GET", READ, alloc="pause", query=f"task={TASK}"),
    *(
        Row(
            "/v1/client/allocation/{alloc_id}/pause",
            m,
            frozenset({"job-submit"}),
            alloc="pause",
            body={"Task": TASK, "ScheduleState": "run"},
            reads=False,
        )
        for m in ("POST", "PUT")
    ),
    Row(EXEC_PATH, "GET", EXEC, query=EXEC_QUERY, reads=False),
    Row(EXEC_PATH, "GET", NODE_EXEC, alloc="raw", query=EXEC_QUERY, reads=False),
]


def skip_unless_routed(row: Row, routes: set[tuple[str, str]]) -> None:
    if (row.path, row.method) not in routes:
        reason = f"{row.method} {row.path} is not routed (yet): nothing to authorize"
        print(reason)
        pytest.skip(reason)


def perform(base: str, row: Row, alloc_id: str, namespace: str, token: str | None) -> Reply:
    url = row.url(alloc_id, namespace)
    if row.path == EXEC_PATH:
        return exec_reply(base, url, token)
    return call(base, url, method=row.method, token=token, body=row.body)


def test_every_routed_endpoint_has_a_row(routes: set[tuple[str, str]]) -> None:
    missing = routes - {(row.path, row.method) for row in ROWS}
    assert not missing, f"add these endpoints to the capability table: {sorted(missing)}"


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("signal", {"Signal": "SIGBOGUS", "Task": TASK}),
        ("signal", {"Task": TASK}),
        ("restart", {"TaskName": TASK, "AllTasks": True}),
    ],
)
def test_the_capability_is_checked_before_the_payload(world: World, action: str, body: Any) -> None:
    """As in Nomad: lookup, then `alloc-lifecycle`, then what the body asks for."""
    alloc_id = world.ids[(world.a, "sig")]
    path = f"/v1/client/allocation/{alloc_id}/{action}"
    reply = call(world.acl.api, path, method="POST", token=world.token("cap-read-job"), body=body)
    assert denied(reply), reply


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_capability_table(world: World, routes: set[tuple[str, str]], row: Row) -> None:
    skip_unless_routed(row, routes)
    alloc_id = world.ids[(world.a, row.alloc)]
    # Denials first: an allowed stop changes the allocation for good.
    users = sorted(TABLE_USERS, key=lambda u: row.allows(TABLE_USERS[u]))
    outcomes = []
    for user in users:
        reply = perform(world.acl.api, row, alloc_id, world.a, world.token(user))
        outcomes.append((user, reply.status, reply.body[:120]))
        caps = TABLE_USERS[user]
        if not row.allows(caps):
            assert denied(reply), f"{user} ({sorted(caps)}) got {reply} on {row.id}"
        elif row.reads:
            assert reply.status == row.expect, f"{user} ({sorted(caps)}) got {reply} on {row.id}"
        else:
            assert reply.status != 403 and reply.status < 500, (
                f"{user} ({sorted(caps)}) got {reply} on {row.id}"
            )
    print(row.id, outcomes)
    if row.needs is not None:
        anonymous = perform(world.acl.api, row, alloc_id, world.a, None)
        assert denied(anonymous), f"no token got {anonymous} on {row.id}"


def test_acl_disabled_allows_everything(world: World, routes: set[tuple[str, str]]) -> None:
    """`acl { enabled = false }`: no token, or garbage, reaches every endpoint."""
    tried = []
    for row in ROWS:
        if (row.path, row.method) not in routes:
            continue
        alloc_id = world.ids[(world.d, row.alloc)]
        for token in (None, "garbage"):
            reply = perform(world.open.api, row, alloc_id, world.d, token)
            assert reply.status != 403, f"{row.id} with token {token!r}: {reply}"
            if row.reads:
                assert reply.status == row.expect, f"{row.id} with token {token!r}: {reply}"
        tried.append(row.id)
    everywhere = call(world.open.api, "/v1/allocations?namespace=*")
    assert {s["Namespace"] for s in everywhere.json()} == {world.d}
    assert tried


# -- exec over WebSocket -----------------------------------------------------------------------


def exec_reply(base: str, url: str, token: str | None, *, handshake: bool = False) -> Reply:
    """The exec endpoint's outcome as a Reply: the HTTP status when the upgrade is refused;
    after an upgrade, 403 `Permission denied` if the stream closes with that reason, else 200
    with the frames received (as JSON lines) or 400 with the close reason."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus
    from websockets.sync.client import connect

    ws_url = "ws" + base.removeprefix("http") + url
    if handshake:
        ws_url += "&ws_handshake=true"
    headers = {} if token is None or handshake else {"X-Nomad-Token": token}
    try:
        with connect(ws_url, additional_headers=headers, open_timeout=30) as ws:
            if handshake:
                ws.send(json.dumps({"version": 1, "auth_token": token or ""}))
            frames: list[bytes] = []
            try:
                while True:
                    message = ws.recv(timeout=30)
                    raw = message.encode() if isinstance(message, str) else message
                    frames.append(raw)
                    if b'"exited"' in raw:
                        return Reply(200, b"\n".join(frames))
            except ConnectionClosed as closed:
                reason = closed.rcvd.reason if closed.rcvd is not None else ""
                if "Permission denied" in reason:
                    return Reply(403, b"Permission denied")
                if frames:
                    return Reply(200, b"\n".join(frames))
                return Reply(400, reason.encode())
    except InvalidStatus as refused:
        return Reply(refused.response.status_code, bytes(refused.response.body or b""))


# -- where the token comes from ----------------------------------------------------------------


def test_tokens_from_each_source(world: World) -> None:
    path = f"/v1/allocations?namespace={world.a}"
    good, api = world.token("reader-a"), world.acl.api
    for source in ("X-Nomad-Token", "Bearer", "bearer"):
        reply = call(api, path, token=good, source=source)
        assert reply.status == 200 and reply.json(), f"{source}: {reply}"
        assert denied(call(api, path, token="garbage", source=source)), source
    # Nomad's order: X-Nomad-Token wins over Authorization.
    both = call(api, path, token="garbage", headers={"Authorization": f"Bearer {good}"})
    assert denied(both)
    both = call(api, path, token=good, headers={"Authorization": "Bearer garbage"})
    assert both.status == 200
    assert denied(call(api, path))
    assert denied(call(api, path, headers={"Authorization": "Basic " + good}))


def test_acl_audiences_accept_only_tokens_minted_for_them(world: World, tmp_path: Path) -> None:
    assert world.sa_kubeconfig is not None
    folder = tmp_path / "audiences"
    folder.mkdir()
    strict = Operator(
        folder, world.sa_kubeconfig, acl=True, audiences=("allocbridge",), namespaces=(world.a,)
    ).start()
    try:
        path = f"/v1/allocations?namespace={world.a}"
        minted = world.kubectl(
            "create", "token", "reader-a", "-n", world.a, "--audience", "allocbridge"
        ).stdout.strip()
        reply = call(strict.api, path, token=minted)
        assert reply.status == 200 and reply.json(), reply
        assert denied(call(strict.api, path, token=world.token("reader-a")))  # API server's aud
        assert denied(call(world.acl.api, path, token=minted))  # no audiences: the API server's
    finally:
        strict.stop()


def test_exec_token_from_the_handshake_frame(world: World, routes: set[tuple[str, str]]) -> None:
    skip_unless_routed(Row(EXEC_PATH, "GET", EXEC), routes)
    url = EXEC_PATH.replace("{alloc_id}", world.ids[(world.a, "web")]) + "?" + EXEC_QUERY
    allowed = exec_reply(world.acl.api, url, world.token("cap-alloc-exec"), handshake=True)
    assert allowed.status == 200 and b"exited" in allowed.body, allowed
    for token in (world.token("cap-read-job"), "garbage", None):
        reply = exec_reply(world.acl.api, url, token, handshake=True)
        assert denied(reply), f"handshake token {token and token[:10]!r}: {reply}"


def test_python_nomad_client_with_a_token(world: World) -> None:
    """A real Nomad client sends NOMAD_TOKEN as `X-Nomad-Token`."""
    port = int(world.acl.api.rsplit(":", 1)[1])
    client = nomad.Nomad(port=port, token=world.token("reader-a"), namespace=world.a, timeout=60)
    listed = client.allocations.get_allocations(namespace=world.a)
    assert {a["ID"] for a in listed} >= {world.ids[(world.a, "web")]}
    anonymous = nomad.Nomad(port=port, namespace=world.a, timeout=60)
    with pytest.raises(URLNotAuthorizedNomadException):
        anonymous.allocations.get_allocations(namespace=world.a)


# -- namespaces --------------------------------------------------------------------------------


def namespaces_listed(world: World, user: str, namespace: str) -> Reply:
    return call(world.acl.api, f"/v1/allocations?namespace={namespace}", token=world.token(user))


def test_a_rolebinding_scopes_a_caller_to_its_namespace(world: World) -> None:
    a, b = world.a, world.b
    own = namespaces_listed(world, "reader-a", a)
    assert own.status == 200
    assert {s["ID"] for s in own.json()} >= {world.ids[(a, n)] for n in TABLE_ALLOCS}
    assert {s["Namespace"] for s in own.json()} == {a}
    assert denied(namespaces_listed(world, "reader-a", b))
    every = namespaces_listed(world, "reader-a", ALL_NAMESPACES)
    assert every.status == 200
    assert {s["Namespace"] for s in every.json()} == {a}
    assert world.ids[(a, "web")] in {s["ID"] for s in every.json()}
    api, token = world.acl.api, world.token("reader-a")
    assert call(api, f"/v1/allocation/{world.ids[(a, 'web')]}", token=token).status == 200
    assert denied(call(api, f"/v1/allocation/{world.ids[(b, 'web-b')]}", token=token))


def test_every_namespace_is_empty_not_forbidden_without_visible_allocations(
    world: World,
) -> None:
    quiet = namespaces_listed(world, "reader-quiet", ALL_NAMESPACES)
    assert (quiet.status, quiet.body) == (200, b"[]")
    assert denied(namespaces_listed(world, "reader-quiet", world.a))
    # No grant anywhere: Nomad answers 403 for `*` too.
    assert denied(namespaces_listed(world, "nobody", ALL_NAMESPACES))


def test_a_cluster_wide_grant_sees_every_namespace(world: World) -> None:
    every = namespaces_listed(world, "admin", ALL_NAMESPACES)
    assert every.status == 200
    assert {s["Namespace"] for s in every.json()} == {world.a, world.b}


def test_a_blocking_every_namespace_list_wakes_with_a_readable_namespaces_first_allocation(
    world: World, tmp_path: Path
) -> None:
    """A namespace the caller may read but that holds no allocation is not weighed when a
    blocking `namespace=*` list parks; its first allocation must still wake the list and be in
    the answer, or the answer's index would cover an allocation the caller never sees. The
    namespace and the replica watching it are the test's own (the module's `acl` replica
    watches a fixed set)."""
    k, late = world.kubectl, f"auth-late-{uuid.uuid4().hex[:6]}"
    assert world.sa_kubeconfig is not None
    replica = Operator(tmp_path, world.sa_kubeconfig, acl=True, namespaces=(late,))
    try:
        k("create", "namespace", late)
        wait_namespace(k, late)
        k("create", "serviceaccount", "reader", "-n", late)
        k(
            "create",
            "rolebinding",
            "reader",
            "--clusterrole=allocbridge-reader",
            f"--serviceaccount={late}:reader",
            "-n",
            late,
        )
        subject = f"system:serviceaccount:{late}:reader"
        eventually(
            partial(can_i, k, subject, "read-job", late),
            timeout=60,
            what=f"RBAC to let {subject} read-job in {late}",
        )
        token = create_token(k, late, "reader")
        replica.start()
        every = f"{replica.api}/v1/allocations?namespace={ALL_NAMESPACES}"
        status, body, headers = http(every, token=token)
        assert (status, body) == (200, b"[]")
        index = int(headers["X-Nomad-Index"])

        answers: list[tuple[int, bytes, dict[str, str]]] = []
        wait = 20
        parked = threading.Thread(
            target=lambda: answers.append(http(f"{every}&index={index}&wait={wait}s", token=token)),
            daemon=True,
        )
        parked.start()
        time.sleep(0.3)  # parked before the allocation is created
        assert not answers, "the list did not park"
        started = time.monotonic()
        k.apply(alloc_manifest(late, "first", "docker"))
        parked.join(timeout=10)
        assert answers, f"the first allocation left the list parked (10 s of its {wait} s)"
        assert time.monotonic() - started < wait
        status, body, headers = answers[0]
        assert status == 200, body
        assert int(headers["X-Nomad-Index"]) > index
        uid = k.json("get", "allocation", "first", "-n", late)["metadata"]["uid"]
        assert [(s["ID"], s["Namespace"]) for s in json.loads(body)] == [(uid, late)]
    finally:
        replica.stop()
        k("delete", "namespace", late, "--wait=false", "--ignore-not-found", check=False)


async def test_every_namespace_without_configured_namespaces_lists_them(world: World) -> None:
    """The authorizer alone, as a replica watching every namespace runs it: `*` searches the
    namespaces that exist, under the operator's own credentials."""
    assert world.sa_kubeconfig is not None
    credentials = await load_credentials(KubernetesSettings(kubeconfig=str(world.sa_kubeconfig)))
    auth = KubernetesAuthorizer()
    auth.connect(credentials)
    try:
        quiet = Caller(world.token("reader-quiet"))
        await auth.check(quiet, "read-job", ALL_NAMESPACES)
        assert await auth.allowed_namespaces(quiet, "read-job", [world.a, world.b]) == frozenset()
        reader = Caller(world.token("reader-a"))
        scoped = await auth.allowed_namespaces(reader, "read-job", [world.a, world.b])
        assert scoped == frozenset({world.a})
        admin = Caller(world.token("admin"))
        assert await auth.allowed_namespaces(admin, "read-job", [world.a, world.b]) is None
        with pytest.raises(PermissionDeniedError):
            await auth.check(Caller(world.token("nobody")), "read-job", ALL_NAMESPACES)
    finally:
        await auth.close()


# -- bad tokens --------------------------------------------------------------------------------


def forged_jwt() -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    claims = {
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": "system:serviceaccount:kube-system:default",
        "exp": int(time.time()) + 3600,
    }
    return f"{part({'alg': 'RS256', 'kid': 'x'})}.{part(claims)}.{secrets.token_urlsafe(64)}"


def test_garbage_tokens_are_denied(world: World) -> None:
    path = f"/v1/allocations?namespace={world.a}"
    for token in ("garbage", forged_jwt(), world.token("reader-a")[:-4] + "AAAA"):
        assert denied(call(world.acl.api, path, token=token)), token[:20]


def test_a_token_that_stops_authenticating_is_denied(world: World) -> None:
    """Stand-in for an expired token: its ServiceAccount is deleted, so TokenReview fails.
    Cached reviews may carry it for up to the cache TTL (10 s), not longer."""
    path = f"/v1/allocations?namespace={world.a}"
    token = world.token("doomed")
    assert call(world.acl.api, path, token=token).status == 200
    world.kubectl("delete", "serviceaccount", "doomed", "-n", world.a)
    started = time.monotonic()
    eventually(
        lambda: denied(call(world.acl.api, path, token=token)),
        timeout=30,
        what="the deleted ServiceAccount's token to be denied",
    )
    assert time.monotonic() - started < 20


# -- the shipped roles -------------------------------------------------------------------------


@pytest.mark.parametrize("role", sorted(SHIPPED_ROLES))
def test_shipped_roles_grant_exactly_their_capabilities(world: World, role: str) -> None:
    subject = f"system:serviceaccount:{world.a}:role-{role.removeprefix('allocbridge-')}"
    granted = {
        cap
        for cap in (*CAPABILITIES, *READ_CAPABILITIES)
        if can_i(world.kubectl, subject, cap, world.a)
    }
    assert granted == SHIPPED_ROLES[role]
    assert not can_i(world.kubectl, subject, "read-job", world.b)  # a RoleBinding stays put
    assert not can_i(world.kubectl, subject, "get", world.a)  # nothing in Kubernetes itself


def test_example_binding_applies_and_scopes(world: World) -> None:
    documents = list(
        yaml.safe_load_all((REPO / "manifests" / "examples" / "binding.yaml").read_text())
    )
    for document in documents:
        document["metadata"]["namespace"] = world.a
        for subject in document.get("subjects", []):
            if subject["kind"] == "ServiceAccount":
                subject["namespace"] = world.a
        world.kubectl.apply(document)
    subject = f"system:serviceaccount:{world.a}:ci"
    eventually(lambda: can_i(world.kubectl, subject, "read-job", world.a), what="the binding")
    token = create_token(world.kubectl, world.a, "ci")
    assert call(world.acl.api, f"/v1/allocations?namespace={world.a}", token=token).status == 200
    assert denied(call(world.acl.api, f"/v1/allocations?namespace={world.b}", token=token))
    assert not can_i(world.kubectl, subject, "job-submit", world.a)
