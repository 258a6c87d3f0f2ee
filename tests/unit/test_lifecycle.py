"""The draining state machine behind `/health`."""

from __future__ import annotations

from allocbridge.lifecycle import Lifecycle, Next, Phase, Upstream


def test_starting_replica_is_unhealthy_until_serving() -> None:
    life = Lifecycle(grace_period=2.0)
    assert life.health_status() == 503
    assert life.worker_state == "unknown"
    life.serving()
    assert life.health_status() == 200
    assert life.worker_state == "active"


def test_first_signal_drains_when_a_grace_period_is_set() -> None:
    life = Lifecycle(grace_period=2.0)
    life.serving()
    assert life.on_signal() is Next.DRAIN
    assert life.phase is Phase.DRAINING
    assert life.health_status() == 503
    assert life.worker_state == "shutdown"


def test_second_signal_stops_and_third_forces() -> None:
    life = Lifecycle(grace_period=2.0)
    life.serving()
    life.on_signal()
    assert life.on_signal() is Next.STOP
    assert life.health_status() == 503
    assert life.on_signal() is Next.FORCE


def test_without_grace_period_there_is_no_drain_phase() -> None:
    life = Lifecycle(grace_period=None)
    life.serving()
    assert life.on_signal() is Next.STOP
    assert life.phase is Phase.STOPPING


def test_zero_grace_period_still_flips_health() -> None:
    life = Lifecycle(grace_period=0.0)
    life.serving()
    assert life.on_signal() is Next.DRAIN
    assert life.health_status() == 503


def test_draining_is_one_way() -> None:
    life = Lifecycle(grace_period=1.0)
    life.serving()
    life.on_signal()
    life.serving()
    assert life.health_status() == 503


def test_unsynced_store_keeps_the_replica_unready() -> None:
    life = Lifecycle(store_synced=False)
    life.serving()
    assert life.health_status() == 503
    life.store_synced = True
    assert life.health_status() == 200


def test_worker_info_shape() -> None:
    life = Lifecycle()
    life.serving()
    life.upstream = Upstream.TRANSIENT_FAILURE
    life.active_sessions = 2
    assert life.worker_info() == {
        "worker_process_info": {
            "state": "active",
            "active_session_count": 2,
            "upstream_connection_state": "TRANSIENT_FAILURE",
        }
    }
