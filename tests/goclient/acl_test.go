package goclient

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestDenied: against an operator with ACLs enabled, a token without grants (NOMAD_TOKEN) is
// refused everything, and a token that may only read (GOCLIENT_READER_TOKEN, the shipped
// allocbridge-reader role) reads but is refused every change and exec. GOCLIENT_ALLOC is a
// running allocation in NOMAD_NAMESPACE.
func TestDenied(t *testing.T) {
	values := env(t, "GOCLIENT_ALLOC", "GOCLIENT_READER_TOKEN", "NOMAD_TOKEN")
	id, readerToken := values[0], values[1]
	const denied = "Permission denied"

	nobody := newClient(t).Allocations() // NOMAD_TOKEN, as the CLI takes it
	_, _, err := nobody.List(nil)
	wantResponse(t, "List without grants", err, 403, denied, true)
	_, _, err = nobody.Info(id, nil)
	wantResponse(t, "Info without grants", err, 403, denied, true)
	_, _, err = nobody.Info(unknownID, nil)
	wantResponse(t, "Info(unknown) without grants", err, 403, denied, true)
	_, _, err = clientWithToken(t, "not-a-token").Allocations().List(nil)
	wantResponse(t, "List with a garbage token", err, 403, denied, true)
	_, _, err = clientWithToken(t, "").Allocations().List(nil)
	wantResponse(t, "List without a token", err, 403, denied, true)

	reader := clientWithToken(t, readerToken)
	readerAllocs := reader.Allocations()
	stubs, _, err := readerAllocs.List(nil)
	if err != nil || !slices.Contains(ids(stubs), id) {
		t.Fatalf("reader List: %v, %v", ids(stubs), err)
	}
	alloc := info(t, reader, id)
	if _, _, err := readerAllocs.GetPauseState(alloc, nil, "main"); err != nil {
		t.Fatalf("reader GetPauseState: %v", err)
	}
	if _, _, err := readerAllocs.Services(id, nil); err != nil {
		t.Fatalf("reader Services: %v", err)
	}
	if _, err := readerAllocs.Checks(id, nil); err != nil {
		t.Fatalf("reader Checks: %v", err)
	}

	err = nobody.Signal(alloc, nil, "main", "SIGHUP")
	wantResponse(t, "Signal without grants", err, 403, denied, true)
	err = readerAllocs.Signal(alloc, nil, "main", "SIGHUP")
	wantResponse(t, "reader Signal", err, 403, denied, true)
	err = readerAllocs.Restart(alloc, "main", nil)
	wantResponse(t, "reader Restart", err, 403, denied, true)
	err = readerAllocs.RestartAllTasks(alloc, nil)
	wantResponse(t, "reader RestartAllTasks", err, 403, denied, true)
	err = readerAllocs.SetPauseState(alloc, nil, "main", "pause")
	wantResponse(t, "reader SetPauseState", err, 403, denied, true)
	_, err = readerAllocs.Stop(alloc, nil)
	wantResponse(t, "reader Stop", err, 403, denied, true)

	for name, client := range map[string]*api.Client{"reader": reader, "nobody": newClient(t)} {
		got := execIn(t, client, alloc, "main", false, []string{"echo", "hello"},
			strings.NewReader(""), nil)
		if got.err == nil || got.code != -2 || !strings.Contains(got.err.Error(), denied) ||
			got.stdout != "" {
			t.Fatalf("%s Exec: %+v", name, got)
		}
		t.Logf("%s Exec: the client reports %q", name, got.err)
	}

	final := info(t, reader, id)
	if final.ClientStatus != "running" || final.DesiredStatus != "run" ||
		final.TaskStates["main"].Restarts != 0 || slices.Contains(eventTypes(final.TaskStates["main"]), api.TaskSignaling) {
		t.Fatalf("a denied call changed the allocation: %+v", final.TaskStates["main"])
	}
}
