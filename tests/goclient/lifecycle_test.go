package goclient

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestSignal: Signal to one task and to every task, and its errors. GOCLIENT_ALLOC is a
// running allocation whose task "main" handles SIGUSR1 and SIGHUP; the wrapper checks that
// the signals reached the container.
func TestSignal(t *testing.T) {
	id := env(t, "GOCLIENT_ALLOC")[0]
	client := newClient(t)
	allocs := client.Allocations()
	alloc := info(t, client, id)

	if err := allocs.Signal(alloc, nil, "main", "SIGUSR1"); err != nil {
		t.Fatalf("Signal(main, SIGUSR1): %v", err)
	}
	if err := allocs.Signal(alloc, nil, "", "SIGHUP"); err != nil {
		t.Fatalf("Signal(all tasks, SIGHUP): %v", err)
	}
	eventually(t, "two Signaling events", func() (bool, string) {
		types := eventTypes(info(t, client, id).TaskStates["main"])
		return count(types, api.TaskSignaling) >= 2, fmt.Sprint(types)
	})
	state := info(t, client, id).TaskStates["main"]
	if state.State != "running" || state.Restarts != 0 {
		t.Fatalf("a handled signal must not end the task: %+v", state)
	}

	err := allocs.Signal(alloc, nil, "ghost", "SIGUSR1")
	wantResponse(t, "Signal(unknown task)", err, 404, "Task not found", true)
	err = allocs.Signal(alloc, nil, "main", "SIGNOPE")
	wantResponse(t, "Signal(unknown signal)", err, 400, "SIGNOPE", false)
}

// TestRestart: Restart of one task, RestartAllTasks, and the errors: a task that is not
// running (a finished prestart task), an unknown task, and TaskName with AllTasks (which the
// client's methods never send, so it goes through the client's Raw().Write).
// GOCLIENT_ALLOC runs a prestart task "setup" and a main task "main".
func TestRestart(t *testing.T) {
	id := env(t, "GOCLIENT_ALLOC")[0]
	client := newClient(t)
	allocs := client.Allocations()
	alloc := info(t, client, id)
	if state := alloc.TaskStates["setup"]; state == nil || state.State != "dead" || state.Failed {
		t.Fatalf("setup should have finished successfully: %+v", state)
	}

	if err := allocs.Restart(alloc, "main", nil); err != nil {
		t.Fatalf("Restart(main): %v", err)
	}
	eventually(t, "main to restart once", func() (bool, string) {
		state := info(t, client, id).TaskStates["main"]
		return state.Restarts == 1 && state.State == "running", fmt.Sprintf("%+v", state)
	})
	types := eventTypes(info(t, client, id).TaskStates["main"])
	if count(types, api.TaskRestartSignal) != 1 || count(types, api.TaskRestarting) != 1 {
		t.Fatalf("Restart(main): events %v", types)
	}
	firstSignal := lastEventTime(info(t, client, id).TaskStates["main"], api.TaskRestartSignal)

	err := allocs.Restart(alloc, "setup", nil)
	wantResponse(t, "Restart(finished task)", err, 409, "Task not running", true)
	err = allocs.Restart(alloc, "ghost", nil)
	wantResponse(t, "Restart(unknown task)", err, 404, "Could not find task runner for task: ghost", true)
	body := map[string]any{"TaskName": "main", "AllTasks": true}
	_, err = client.Raw().Write("/v1/client/allocation/"+id+"/restart", body, nil, nil)
	wantResponse(t, "restart with TaskName and AllTasks", err, 400,
		"task name cannot be set when restarting all tasks", true)

	if err := allocs.RestartAllTasks(alloc, nil); err != nil {
		t.Fatalf("RestartAllTasks: %v", err)
	}
	eventually(t, "every task to start again, the prestart task included", func() (bool, string) {
		now := info(t, client, id)
		setup, main := eventTypes(now.TaskStates["setup"]), eventTypes(now.TaskStates["main"])
		// A prestart task that ran to completion shows Terminated (it was never seen running).
		// Only the latest 10 events are kept, as in Nomad: a real kubelet's own events (image,
		// created, started, killing) can push the first restart's out, so the second one is
		// told by its time.
		newSignal := lastEventTime(now.TaskStates["main"], api.TaskRestartSignal) > firstSignal
		done := afterRestart(setup, api.TaskTerminated) && afterRestart(main, api.TaskStarted) &&
			newSignal && now.ClientStatus == "running" && now.TaskStates["main"].State == "running"
		return done, fmt.Sprintf("%s setup=%v main=%v", now.ClientStatus, setup, main)
	})
}

// afterRestart: the task's latest Restart Signaled event is followed by an event of type want.
func afterRestart(types []string, want string) bool {
	for i := len(types) - 1; i >= 0; i-- {
		if types[i] == api.TaskRestartSignal {
			return slices.Contains(types[i+1:], want)
		}
	}
	return false
}

// TestPause: GetPauseState and SetPauseState on a task without a schedule, and their errors.
// GOCLIENT_ALLOC is a running allocation; the wrapper checks the STOP and CONT it causes.
func TestPause(t *testing.T) {
	id := env(t, "GOCLIENT_ALLOC")[0]
	client := newClient(t)
	allocs := client.Allocations()
	alloc := info(t, client, id)

	get := func() string {
		t.Helper()
		state, _, err := allocs.GetPauseState(alloc, nil, "main")
		if err != nil {
			t.Fatalf("GetPauseState: %v", err)
		}
		return state
	}
	if state := get(); state != "" {
		t.Fatalf("GetPauseState before any override = %q, want \"\"", state)
	}
	for _, step := range []struct{ request, want string }{
		{"pause", "force_pause"},
		{"scheduled", ""},
	} {
		if err := allocs.SetPauseState(alloc, nil, "main", step.request); err != nil {
			t.Fatalf("SetPauseState(%s): %v", step.request, err)
		}
		if state := get(); state != step.want {
			t.Fatalf("after SetPauseState(%s): %q, want %q", step.request, state, step.want)
		}
	}
	types := eventTypes(info(t, client, id).TaskStates["main"])
	if !slices.Contains(types, "Pausing") || !slices.Contains(types, "Running") {
		t.Fatalf("pause events: %v", types)
	}

	err := allocs.SetPauseState(alloc, nil, "main", "bogus")
	wantResponse(t, "SetPauseState(bogus)", err, 400, "Not a valid task schedule state", true)
	err = allocs.SetPauseState(alloc, nil, "ghost", "pause")
	wantResponse(t, "SetPauseState(unknown task)", err, 404, "Task not found", true)
	_, _, err = allocs.GetPauseState(alloc, nil, "ghost")
	wantResponse(t, "GetPauseState(unknown task)", err, 404, "Task not found", true)
}

// TestStop: Stop with no_shutdown_delay (as `nomad alloc stop -no-shutdown-delay` sends it)
// ends the allocation at once despite its group's shutdown delay, and links a replacement.
// GOCLIENT_ALLOC is a running allocation whose group has a 10s shutdown delay.
func TestStop(t *testing.T) {
	id := env(t, "GOCLIENT_ALLOC")[0]
	client := newClient(t)
	allocs := client.Allocations()
	alloc := info(t, client, id)

	start := time.Now()
	opts := &api.QueryOptions{Params: map[string]string{"no_shutdown_delay": "true"}}
	resp, err := allocs.Stop(alloc, opts)
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if len(resp.EvalID) != 36 || resp.LastIndex == 0 {
		t.Fatalf("Stop: %+v", resp)
	}
	// `nomad alloc stop` (without -detach) reads the evaluation at once and gives up on the
	// first error ("No evaluation with id ... found"): no retry here either.
	evals := client.Evaluations()
	if _, _, err := evals.Info(resp.EvalID, nil); err != nil {
		t.Fatalf("Evaluations().Info right after the stop: %v", err)
	}
	var stopped *api.Allocation
	eventually(t, "the allocation to stop", func() (bool, string) {
		stopped = info(t, client, id)
		return stopped.ClientStatus == "complete", stopped.ClientStatus
	})
	if elapsed := time.Since(start); elapsed > 8*time.Second {
		t.Fatalf("the stop took %v: the 10s shutdown delay was not skipped", elapsed)
	}
	if stopped.DesiredStatus != "stop" || stopped.NextAllocation == "" ||
		stopped.DesiredTransition.Migrate == nil || !*stopped.DesiredTransition.Migrate {
		t.Fatalf("stopped allocation: desired %s, next %q, transition %+v",
			stopped.DesiredStatus, stopped.NextAllocation, stopped.DesiredTransition)
	}
	t.Logf("stopped in %v; replacement %s", time.Since(start), stopped.NextAllocation)

	// What `nomad alloc stop` without -detach does next: follow the evaluation until it is
	// complete and list the allocations it placed.
	eventually(t, "the stop's evaluation to list its placement", func() (bool, string) {
		placed, _, err := evals.Allocations(resp.EvalID, nil)
		if err != nil {
			return false, err.Error()
		}
		return len(placed) == 1 && placed[0].ID == stopped.NextAllocation, fmt.Sprint(ids(placed))
	})
	eval, _, err := evals.Info(resp.EvalID, nil)
	if err != nil {
		t.Fatalf("Evaluations().Info: %v", err)
	}
	if eval.ID != resp.EvalID || eval.Status != "complete" || eval.TriggeredBy != "alloc-stop" ||
		eval.JobID != alloc.JobID || eval.Namespace != alloc.Namespace || eval.NextEval != "" {
		t.Fatalf("the stop's evaluation: %+v", eval)
	}

	eventually(t, "the replacement to run", func() (bool, string) {
		next, _, err := allocs.Info(stopped.NextAllocation, nil)
		if err != nil {
			return false, err.Error()
		}
		return next.ClientStatus == "running", next.ClientStatus
	})
	next := info(t, client, stopped.NextAllocation)
	if next.PreviousAllocation != id || next.RescheduleTracker == nil ||
		len(next.RescheduleTracker.Events) != 1 || next.RescheduleTracker.Events[0].PrevAllocID != id {
		t.Fatalf("replacement: previous %q, tracker %+v", next.PreviousAllocation, next.RescheduleTracker)
	}

	_, err = allocs.Stop(stopped, nil)
	wantResponse(t, "Stop(already stopped)", err, 409, "already stopped", false)
	err = allocs.Signal(stopped, nil, "", "SIGHUP")
	wantResponse(t, "Signal(stopped)", err, 409, "Task not running", true)
	err = allocs.Restart(stopped, "", nil)
	wantResponse(t, "Restart(stopped)", err, 409, "restart of an alloc that should not run", true)
}

// TestUnknownAllocation: every call on an allocation that does not exist, with Nomad's
// status and text.
func TestUnknownAllocation(t *testing.T) {
	env(t, "NOMAD_ADDR")
	allocs := newClient(t).Allocations()
	ghost := &api.Allocation{ID: unknownID, NodeID: unknownID}
	unknown := fmt.Sprintf("Unknown allocation %q", unknownID)

	_, _, err := allocs.Info(unknownID, nil)
	wantResponse(t, "Info", err, 404, "alloc not found", true)
	_, err = allocs.Stop(ghost, nil)
	wantResponse(t, "Stop", err, 404, "allocation not found", true)
	err = allocs.Signal(ghost, nil, "main", "SIGHUP")
	wantResponse(t, "Signal", err, 404, unknown, true)
	err = allocs.Restart(ghost, "main", nil)
	wantResponse(t, "Restart", err, 404, unknown, true)
	err = allocs.RestartAllTasks(ghost, nil)
	wantResponse(t, "RestartAllTasks", err, 404, unknown, true)
	_, _, err = allocs.GetPauseState(ghost, nil, "main")
	wantResponse(t, "GetPauseState", err, 404, unknown, true)
	err = allocs.SetPauseState(ghost, nil, "main", "pause")
	wantResponse(t, "SetPauseState", err, 404, unknown, true)
	_, _, err = allocs.Services(unknownID, nil)
	wantResponse(t, "Services", err, 404, "allocation not found", true)
	_, err = allocs.Checks(unknownID, nil)
	wantResponse(t, "Checks", err, 404, unknown, true)
	_, _, err = newClient(t).Evaluations().Info(unknownID, nil)
	wantResponse(t, "Evaluations().Info", err, 404, "eval not found", true)
	found, _, err := allocs.PrefixList("0f0f0f0f")
	if err != nil || len(found) != 0 {
		t.Fatalf("PrefixList(no match) = %v, %v; want []", ids(found), err)
	}
}
