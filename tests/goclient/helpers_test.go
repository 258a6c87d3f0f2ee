package goclient

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// pollTimeout bounds every wait for the cluster to reach a state.
const pollTimeout = 90 * time.Second

// unknownID is a well-formed allocation ID that no allocation has.
const unknownID = "0f0f0f0f-0000-4000-8000-000000000000"

// env returns the named variables, skipping the test when one is unset: the steps run only
// under tests/cluster/test_go_client.py, which sets them.
func env(t *testing.T, names ...string) []string {
	t.Helper()
	values := make([]string, len(names))
	for i, name := range names {
		value := os.Getenv(name)
		if value == "" {
			t.Skipf("%s is not set: this step runs under tests/cluster/test_go_client.py", name)
		}
		values[i] = value
	}
	return values
}

// newClient builds the client as the nomad CLI does: from api.DefaultConfig, which reads
// NOMAD_ADDR, NOMAD_NAMESPACE and NOMAD_TOKEN.
func newClient(t *testing.T) *api.Client {
	t.Helper()
	client, err := api.NewClient(api.DefaultConfig())
	if err != nil {
		t.Fatalf("api.NewClient: %v", err)
	}
	return client
}

// clientWithToken is newClient with another ACL token.
func clientWithToken(t *testing.T, token string) *api.Client {
	t.Helper()
	config := api.DefaultConfig()
	config.SecretID = token
	client, err := api.NewClient(config)
	if err != nil {
		t.Fatalf("api.NewClient: %v", err)
	}
	return client
}

// info reads one allocation, failing the test on error.
func info(t *testing.T, client *api.Client, id string) *api.Allocation {
	t.Helper()
	alloc, _, err := client.Allocations().Info(id, nil)
	if err != nil {
		t.Fatalf("Info(%s): %v", id, err)
	}
	return alloc
}

// wantResponse asserts that err is the client's UnexpectedResponseError with this status and
// a body that contains want (the whole body when exact).
func wantResponse(t *testing.T, what string, err error, status int, want string, exact bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %d %q", what, status, want)
	}
	var unexpected api.UnexpectedResponseError
	if !errors.As(err, &unexpected) {
		t.Fatalf("%s: error %T %q is not an api.UnexpectedResponseError", what, err, err)
	}
	body := unexpected.Body()
	matches := strings.Contains(body, want)
	if exact {
		matches = body == want
	}
	if unexpected.StatusCode() != status || !matches {
		t.Fatalf("%s: got %d %q, want %d %q", what, unexpected.StatusCode(), body, status, want)
	}
	t.Logf("%s: the client reports %q", what, err)
}

// eventually polls check until it returns true; the string it returns describes the last
// state seen, for the failure message.
func eventually(t *testing.T, what string, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, seen := check()
		if ok {
			return
		}
		last = seen
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last seen: %s", what, last)
}

// eventTypes lists a task's event types, oldest first, without driver messages.
// lastEventTime: the time of the task's latest event of type want (0 if none).
func lastEventTime(state *api.TaskState, want string) int64 {
	var latest int64
	if state == nil {
		return latest
	}
	for _, event := range state.Events {
		if event.Type == want && event.Time > latest {
			latest = event.Time
		}
	}
	return latest
}

func eventTypes(state *api.TaskState) []string {
	var types []string
	if state == nil {
		return types
	}
	for _, event := range state.Events {
		if event.Type != api.TaskDriverMessage {
			types = append(types, event.Type)
		}
	}
	return types
}

// count returns how often value occurs in values.
func count(values []string, value string) int {
	n := 0
	for _, v := range values {
		if v == value {
			n++
		}
	}
	return n
}
