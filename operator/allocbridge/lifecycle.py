"""The replica's life as the ops listener reports it: a small state machine without I/O.

`/health` answers 200 only while the API listener serves, the store has synced once and no
shutdown has begun. The first shutdown signal turns it to 503 at once (when a grace period is
configured) so that load balancers and readiness probes drain the replica while the API keeps
answering; a second signal cuts the wait short. The 503 switch is one-way, as in Boundary.

The upstream state (the Kubernetes API) is reported, never part of readiness: a replica whose
API server is briefly away still answers from its store, and failing every replica's probe at
once would take the whole Service down for a blip.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Phase(enum.Enum):
    STARTING = "starting"  # listeners not up yet
    SERVING = "serving"  # the API listener accepts requests
    DRAINING = "draining"  # grace period: still serving, reporting 503
    STOPPING = "stopping"  # listeners are being closed


class Upstream(enum.Enum):
    """The connection to the Kubernetes API, in gRPC connectivity terms as Boundary reports them."""

    IDLE = "IDLE"
    CONNECTING = "CONNECTING"
    READY = "READY"
    TRANSIENT_FAILURE = "TRANSIENT_FAILURE"
    SHUTDOWN = "SHUTDOWN"


class Next(enum.Enum):
    """What the process should do after a shutdown signal."""

    DRAIN = "drain"  # start the grace period
    STOP = "stop"  # stop now (no grace period, or a second signal)
    FORCE = "force"  # a third signal: give up on a clean stop


@dataclass
class Lifecycle:
    """Tracks the phase, the upstream state and open sessions; decides what a signal means."""

    grace_period: float | None = None
    phase: Phase = Phase.STARTING
    upstream: Upstream = Upstream.IDLE
    active_sessions: int = 0
    store_synced: bool = True  # the app starts it False and sets it once the store synced
    signals: int = 0

    def serving(self) -> None:
        if self.phase is Phase.STARTING:
            self.phase = Phase.SERVING

    def on_signal(self) -> Next:
        """Record a shutdown signal and say what to do about it."""
        self.signals += 1
        if self.signals >= 3:
            return Next.FORCE
        if self.signals == 1 and self.grace_period is not None and self.phase is Phase.SERVING:
            self.phase = Phase.DRAINING
            return Next.DRAIN
        self.phase = Phase.STOPPING
        return Next.STOP

    def stopping(self) -> None:
        self.phase = Phase.STOPPING

    @property
    def draining(self) -> bool:
        return self.phase in (Phase.DRAINING, Phase.STOPPING)

    def health_status(self) -> int:
        """200 while serving and ready; 503 while starting, draining or stopping."""
        if self.phase is Phase.SERVING and self.store_synced:
            return 200
        return 503

    @property
    def worker_state(self) -> str:
        """Boundary's worker state names: `active`, `shutdown` or `unknown`."""
        if self.phase is Phase.SERVING:
            return "active"
        if self.draining:
            return "shutdown"
        return "unknown"

    def worker_info(self) -> dict[str, object]:
        return {
            "worker_process_info": {
                "state": self.worker_state,
                "active_session_count": self.active_sessions,
                "upstream_connection_state": self.upstream.value,
            }
        }
