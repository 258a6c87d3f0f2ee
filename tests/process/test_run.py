"""The real `allocbridge run` process: listeners, draining on SIGTERM, TLS, metrics.

These start the console entry point as a subprocess with no reachable Kubernetes (KUBECONFIG
points nowhere), which is also the test that the process keeps its listeners up and reports the
upstream state instead of crashing when the API server is away.

Without Kubernetes the allocation store never syncs, so `/health` stays 503 (not ready) while
the listeners serve; the worker view's `state` ("active", then "shutdown") shows the draining
switch instead. The 200 -> 503 flip of a synced replica is proven against a real control plane
in tests/cluster/test_ha.py.
"""

from __future__ import annotations

import datetime
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from allocbridge_localcluster.ports import free_ports


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    api: str
    ops: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def get(url: str, context: ssl.SSLContext | None = None, method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def worker_state(running: Running) -> str:
    """The worker view's `state`: "active" once the listeners serve, "shutdown" when draining."""
    _, body = get(running.ops + "/health?worker_info=1")
    return str(json.loads(body)["worker_process_info"]["state"])


def wait_for(predicate: object, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():  # type: ignore[operator]
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def start(
    tmp_path: Path, config_text: str, api_port: int, ops_port: int, tls: bool = False
) -> Running:
    path = tmp_path / "allocbridge.hcl"
    path.write_text(config_text)
    log = tmp_path / "allocbridge.log"
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "no-such-kubeconfig")}
    process = subprocess.Popen(
        [sys.executable, "-m", "allocbridge.cli", "run", "--config", str(path)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    scheme = "https" if tls else "http"
    return Running(process, f"{scheme}://127.0.0.1:{api_port}", f"http://127.0.0.1:{ops_port}", log)


def config(
    api_port: int, ops_port: int, grace: str | None = '"2s"', controller: bool = True
) -> str:
    text = ""
    if controller:
        text += 'controller {\n  name = "test"\n'
        if grace is not None:
            text += f"  graceful_shutdown_wait_duration = {grace}\n"
        text += "}\n"
    text += f"""
listener "tcp" {{
  purpose = "api"
  address = "127.0.0.1:{api_port}"
  tls_disable = true
}}
listener "tcp" {{
  purpose = "ops"
  address = "127.0.0.1:{ops_port}"
  tls_disable = true
}}
"""
    return text


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[Running]:
    api_port, ops_port = free_ports(2)
    running = start(tmp_path, config(api_port, ops_port), api_port, ops_port)
    wait_for(lambda: worker_state(running) == "active", what="the listeners to serve")
    yield running
    if running.process.poll() is None:
        running.process.kill()
        running.process.wait()


def test_health_is_503_with_empty_body_until_the_store_syncs(replica: Running) -> None:
    assert get(replica.ops + "/health") == (503, b"")
    assert worker_state(replica) == "active"  # serving, just not ready


def test_unknown_api_paths_answer_404(replica: Running) -> None:
    assert get(replica.api + "/v1/nothing-here")[0] == 404


def test_health_rejects_other_methods(replica: Running) -> None:
    assert get(replica.ops + "/health", method="POST") == (405, b"Invalid method")


def test_worker_info_reports_state_sessions_and_upstream(replica: Running) -> None:
    status, body = get(replica.ops + "/health?worker_info=1")
    assert status == 503  # never synced: no Kubernetes
    info = json.loads(body)["worker_process_info"]
    assert info["state"] == "active"
    assert info["active_session_count"] == 0
    # No Kubernetes is reachable: the process keeps retrying instead of crashing.
    assert info["upstream_connection_state"] in ("CONNECTING", "TRANSIENT_FAILURE")
    wait_for(
        lambda: b"Kubernetes API unreachable" in replica.log.read_bytes(),
        what="a logged retry",
    )
    assert replica.process.poll() is None


def test_metrics_has_process_http_and_draining_series(replica: Running) -> None:
    get(replica.api + "/v1/nothing-here")
    status, body = get(replica.ops + "/metrics")
    text = body.decode()
    assert status == 200
    assert "process_resident_memory_bytes" in text
    assert "allocbridge_draining 0.0" in text
    assert 'allocbridge_http_requests_total{code="404",listener="api"' in text
    assert "allocbridge_http_request_duration_seconds_bucket" in text


def test_the_ops_listener_counts_its_own_requests(replica: Running) -> None:
    """The ops listener counts through its middleware (the API's routes count themselves)."""
    assert get(replica.ops + "/health")[0] == 503  # not synced: no Kubernetes here
    text = get(replica.ops + "/metrics")[1].decode()
    labels = 'code="503",listener="ops",method="GET",route="/health"'
    series = f"allocbridge_http_requests_total{{{labels}}}"
    assert series in text, text


def non_loopback_ipv4() -> str | None:
    """An address of this machine that is not loopback: the source address of a route
    outwards (connecting a UDP socket sends nothing), or None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route is looked up
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_a_port_without_a_host_listens_on_every_interface(tmp_path: Path) -> None:
    """`address = ":9203"` binds every interface, as Boundary's listener does through Go's
    `net.Listen`: the kubelet's probe reaches it from outside the pod. An address with a host
    (here the API's `127.0.0.1`) binds only that host."""
    outside = non_loopback_ipv4()
    if outside is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect through")
    api_port, ops_port = free_ports(2)
    text = config(api_port, ops_port).replace(f'"127.0.0.1:{ops_port}"', f'":{ops_port}"')
    running = start(tmp_path, text, api_port, ops_port)
    try:
        wait_for(lambda: worker_state(running) == "active", what="the listeners to serve")
        assert get(f"http://{outside}:{ops_port}/health")[0] == 503  # served there: not synced
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((outside, api_port), timeout=5).close()
    finally:
        running.process.kill()
        running.process.wait()


def test_sigterm_drains_then_exits_zero(replica: Running) -> None:
    assert "allocbridge_draining 0.0" in get(replica.ops + "/metrics")[1].decode()
    replica.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    wait_for(lambda: worker_state(replica) == "shutdown", timeout=1.0, what="draining")
    assert time.monotonic() - signalled < 1.0
    # The API still serves normally during the grace period.
    assert get(replica.api + "/v1/still-serving")[0] == 404
    assert get(replica.ops + "/health")[0] == 503
    assert "allocbridge_draining 1.0" in get(replica.ops + "/metrics")[1].decode()
    time.sleep(1.0)
    assert replica.process.poll() is None, "exited before the grace period ended"
    assert get(replica.api + "/v1/still-serving")[0] == 404
    assert replica.process.wait(timeout=15) == 0
    assert time.monotonic() - signalled >= 2.0
    with pytest.raises(OSError):
        get(replica.api + "/v1/gone")


def test_answers_close_their_kept_alive_connection_while_draining(replica: Running) -> None:
    """A client's next request then opens a new connection, which a Service sends to a
    replica that stays, instead of reusing one the closing listener would cut."""
    host, port = replica.api.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("GET", "/v1/kept-alive")
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 404 and answer.getheader("Connection") is None
        replica.process.send_signal(signal.SIGTERM)
        wait_for(lambda: worker_state(replica) == "shutdown", timeout=1.0, what="draining")
        connection.request("GET", "/v1/same-connection")  # still served, on the same one
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 404 and answer.getheader("Connection") == "close"
    finally:
        connection.close()
    assert replica.process.wait(timeout=15) == 0


def test_an_exec_upgrade_while_draining_keeps_its_connection_upgrade(replica: Running) -> None:
    """The draining replica's `Connection: close` must not land on a 101: a WebSocket client
    refuses an upgrade's answer without `Connection: Upgrade` (aiohttp: "Invalid connection
    header"), which failed an exec session during a rollout."""
    replica.process.send_signal(signal.SIGTERM)
    wait_for(lambda: worker_state(replica) == "shutdown", timeout=1.0, what="draining")
    host, port = replica.api.removeprefix("http://").split(":")
    alloc_id = "5c6fbc4b-180f-497e-8e64-3373be713101"
    request = (
        f"GET /v1/client/allocation/{alloc_id}/exec?task=main&command=%5B%22sh%22%5D HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=5) as connection:
        connection.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = connection.recv(4096)
            assert chunk, f"the connection ended before the answer's head: {head!r}"
            head += chunk
    lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    assert lines[0].startswith("HTTP/1.1 101 "), lines
    assert headers["connection"].lower() == "upgrade" and headers["upgrade"] == "websocket"
    assert replica.process.wait(timeout=15) == 0


def test_second_signal_ends_the_wait_early(tmp_path: Path) -> None:
    api_port, ops_port = free_ports(2)
    running = start(tmp_path, config(api_port, ops_port, grace='"1m"'), api_port, ops_port)
    try:
        wait_for(lambda: worker_state(running) == "active", what="the listeners to serve")
        running.process.send_signal(signal.SIGTERM)
        wait_for(lambda: worker_state(running) == "shutdown", timeout=1.0, what="draining")
        running.process.send_signal(signal.SIGINT)
        assert running.process.wait(timeout=15) == 0
    finally:
        if running.process.poll() is None:
            running.process.kill()


def test_without_grace_period_sigterm_stops_at_once(tmp_path: Path) -> None:
    api_port, ops_port = free_ports(2)
    running = start(tmp_path, config(api_port, ops_port, grace=None), api_port, ops_port)
    try:
        wait_for(lambda: worker_state(running) == "active", what="the listeners to serve")
        started = time.monotonic()
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(timeout=15) == 0
        assert "waiting before shutdown" not in running.output()
        assert time.monotonic() - started < 10
    finally:
        if running.process.poll() is None:
            running.process.kill()


def test_health_is_absent_without_controller_block(tmp_path: Path) -> None:
    api_port, ops_port = free_ports(2)
    running = start(tmp_path, config(api_port, ops_port, controller=False), api_port, ops_port)
    try:
        wait_for(lambda: get(running.ops + "/metrics")[0] == 200, what="/metrics")
        assert get(running.ops + "/health")[0] == 404
    finally:
        running.process.kill()
        running.process.wait()


def write_certificate(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "api.crt", folder / "api.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_tls_api_listener(tmp_path: Path) -> None:
    cert, key = write_certificate(tmp_path)
    api_port, ops_port = free_ports(2)
    text = f"""
controller {{ name = "tls" }}
listener "tcp" {{
  purpose = "api"
  address = "127.0.0.1:{api_port}"
  tls_cert_file = "{cert}"
  tls_key_file = "{key}"
  tls_min_version = "tls13"
}}
listener "tcp" {{
  purpose = "ops"
  address = "127.0.0.1:{ops_port}"
  tls_disable = true
}}
"""
    running = start(tmp_path, text, api_port, ops_port, tls=True)
    try:
        wait_for(lambda: worker_state(running) == "active", what="the listeners to serve")
        trusted = ssl.create_default_context(cafile=str(cert))
        url = f"https://localhost:{api_port}/v1/nothing"
        assert get(url, context=trusted)[0] == 404
        tls12_only = ssl.create_default_context(cafile=str(cert))
        tls12_only.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(urllib.error.URLError):
            get(url, context=tls12_only)
        with pytest.raises(urllib.error.URLError):
            get(url, context=ssl.create_default_context())  # untrusted certificate
    finally:
        running.process.kill()
        running.process.wait()
