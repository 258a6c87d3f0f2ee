package goclient

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// ids returns the IDs of stubs, in their order.
func ids(stubs []*api.AllocationListStub) []string {
	out := make([]string, 0, len(stubs))
	for _, stub := range stubs {
		out = append(out, stub.ID)
	}
	return out
}

func sorted(values []string) []string {
	out := slices.Clone(values)
	sort.Strings(out)
	return out
}

// TestList: List, its QueryMeta, PrefixList, Filter, PerPage/NextToken and Reverse.
// GOCLIENT_ALLOCS holds every allocation ID of NOMAD_NAMESPACE, comma-separated.
func TestList(t *testing.T) {
	all := strings.Split(env(t, "GOCLIENT_ALLOCS")[0], ",")
	namespace := env(t, "NOMAD_NAMESPACE")[0]
	allocs := newClient(t).Allocations()

	stubs, meta, err := allocs.List(nil)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if got := sorted(ids(stubs)); !slices.Equal(got, sorted(all)) {
		t.Fatalf("List: got %v, want %v", got, sorted(all))
	}
	if meta.LastIndex == 0 || !meta.KnownLeader || meta.NextToken != "" {
		t.Fatalf("List: QueryMeta %+v: want an index, a known leader and no next token", meta)
	}
	for _, stub := range stubs {
		if stub.Namespace != namespace || stub.ClientStatus != "running" || stub.CreateIndex == 0 {
			t.Fatalf("List: stub %+v", stub)
		}
		if state := stub.TaskStates["main"]; state == nil || state.State != "running" {
			t.Fatalf("List: stub %s has TaskStates %v", stub.ID, stub.TaskStates)
		}
	}

	t.Run("PrefixList", func(t *testing.T) {
		target := all[0]
		for _, prefix := range []string{target[:4], target[:8], target} {
			found, _, err := allocs.PrefixList(prefix)
			if err != nil {
				t.Fatalf("PrefixList(%q): %v", prefix, err)
			}
			if !slices.Contains(ids(found), target) {
				t.Fatalf("PrefixList(%q) = %v, misses %s", prefix, ids(found), target)
			}
			for _, stub := range found {
				if !strings.HasPrefix(stub.ID, prefix) {
					t.Fatalf("PrefixList(%q) returned %s", prefix, stub.ID)
				}
			}
		}
		found, _, err := allocs.PrefixList(target)
		if err != nil || len(found) != 1 {
			t.Fatalf("PrefixList(full ID) = %v, %v; want exactly one", ids(found), err)
		}
		// The CLI trims an odd prefix itself; the client sends it as is (Nomad: 500).
		_, _, err = allocs.PrefixList(target[:3])
		wantResponse(t, "PrefixList(odd)", err, 400,
			"alloc lookup failed: index error: Input (without hyphens) must be even length", true)
	})

	t.Run("Filter", func(t *testing.T) {
		target := info(t, newClient(t), all[1])
		found, _, err := allocs.List(&api.QueryOptions{
			Filter: fmt.Sprintf("JobID == %q and ClientStatus == \"running\"", target.JobID),
		})
		if err != nil || !slices.Equal(ids(found), []string{target.ID}) {
			t.Fatalf("List(Filter JobID) = %v, %v; want [%s]", ids(found), err, target.ID)
		}
		found, _, err = allocs.List(&api.QueryOptions{Filter: `TaskStates.main.State != "running"`})
		if err != nil || len(found) != 0 {
			t.Fatalf("List(Filter no match) = %v, %v; want []", ids(found), err)
		}
		_, _, err = allocs.List(&api.QueryOptions{Filter: "NotValid"})
		wantResponse(t, "List(bad filter)", err, 400,
			"failed to create result paginator: failed to read filter expression:", false)
		_, _, err = allocs.List(&api.QueryOptions{Filter: `Nope == "x"`})
		wantResponse(t, "List(unknown field)", err, 400,
			"failed to read result page: error finding value in datum: /Nope", false)
	})

	t.Run("PerPage and NextToken", func(t *testing.T) {
		for _, reverse := range []bool{false, true} {
			var seen []string
			pages := 0
			q := &api.QueryOptions{PerPage: 2, Reverse: reverse}
			for {
				page, meta, err := allocs.List(q)
				if err != nil {
					t.Fatalf("List(page %d): %v", pages, err)
				}
				pages++
				if len(page) > 2 || pages > len(all) {
					t.Fatalf("List(PerPage 2): page %d has %d items", pages, len(page))
				}
				seen = append(seen, ids(page)...)
				if meta.NextToken == "" {
					break
				}
				q = &api.QueryOptions{PerPage: 2, Reverse: reverse, NextToken: meta.NextToken}
			}
			if want := (len(all) + 1) / 2; pages != want {
				t.Fatalf("reverse=%v: %d pages, want %d", reverse, pages, want)
			}
			if !slices.Equal(sorted(seen), sorted(all)) {
				t.Fatalf("reverse=%v: pages hold %v, want each of %v once", reverse, seen, all)
			}
		}
	})
}

// TestInfo: Info of a running allocation, and the errors for unknown and malformed IDs.
// GOCLIENT_ALLOC is a running allocation of job GOCLIENT_JOB on node GOCLIENT_NODE.
func TestInfo(t *testing.T) {
	values := env(t, "GOCLIENT_ALLOC", "GOCLIENT_JOB", "GOCLIENT_NODE", "NOMAD_NAMESPACE")
	id, job, node, namespace := values[0], values[1], values[2], values[3]
	allocs := newClient(t).Allocations()

	alloc, meta, err := allocs.Info(id, nil)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if alloc.ID != id || alloc.Namespace != namespace || alloc.JobID != job ||
		alloc.TaskGroup != "g" || alloc.NodeName != node || alloc.NodeID == "" {
		t.Fatalf("Info: identity fields wrong: %+v", alloc)
	}
	if alloc.ClientStatus != "running" || alloc.DesiredStatus != "run" {
		t.Fatalf("Info: status %s/%s", alloc.ClientStatus, alloc.DesiredStatus)
	}
	if alloc.Job == nil || alloc.Job.ID == nil || *alloc.Job.ID != job || len(alloc.Job.TaskGroups) != 1 {
		t.Fatalf("Info: Job %+v", alloc.Job)
	}
	state := alloc.TaskStates["main"]
	if state == nil || state.State != "running" || state.StartedAt.IsZero() ||
		!slices.Contains(eventTypes(state), api.TaskStarted) {
		t.Fatalf("Info: TaskStates %+v", alloc.TaskStates)
	}
	if meta.LastIndex != alloc.ModifyIndex || alloc.CreateIndex == 0 || !meta.KnownLeader {
		t.Fatalf("Info: QueryMeta %+v, CreateIndex %d, ModifyIndex %d",
			meta, alloc.CreateIndex, alloc.ModifyIndex)
	}
	if stub := alloc.Stub(); stub.ID != id || stub.JobType != "service" {
		t.Fatalf("Stub: %+v", stub)
	}

	_, _, err = allocs.Info(unknownID, nil)
	wantResponse(t, "Info(unknown)", err, 404, "alloc not found", true)
	// Nomad answers 500 to a malformed ID; allocbridge answers 400 with Nomad's text.
	_, _, err = allocs.Info(id[:8], nil)
	wantResponse(t, "Info(short ID)", err, 400,
		"alloc lookup failed: index error: UUID must be 36 characters", true)
}

// TestBlockingQueries: a blocking query (WaitIndex/WaitTime) whose wait runs out answers 200
// with the same index; blocking List and Info return once the allocation changes, long before
// their wait runs out. GOCLIENT_ALLOC is a running allocation whose task "main" handles SIGHUP.
// A change that is not the signal (a late Kubernetes Event about the pod) may wake Info first;
// it then waits again from the new index, as a client following an allocation does, and the
// call that returns the signal must have returned after it was sent.
func TestBlockingQueries(t *testing.T) {
	id := env(t, "GOCLIENT_ALLOC")[0]
	client := newClient(t)
	allocs := client.Allocations()
	alloc := info(t, client, id)

	// Until the allocation is quiet (the pod's last status updates may still arrive), a wait
	// returns early with a new index; once it is quiet, the wait runs out.
	const short = 1500 * time.Millisecond
	deadline := time.Now().Add(pollTimeout)
	for quiet := false; !quiet; {
		start := time.Now()
		_, meta, err := allocs.Info(id, &api.QueryOptions{WaitIndex: alloc.ModifyIndex, WaitTime: short})
		elapsed := time.Since(start)
		if err != nil {
			t.Fatalf("Info(WaitTime %v): %v", short, err)
		}
		if meta.LastIndex == alloc.ModifyIndex {
			if elapsed < short-100*time.Millisecond || elapsed > 10*time.Second {
				t.Fatalf("expired wait: same index after %v, want about %v", elapsed, short)
			}
			quiet = true
		} else if time.Now().After(deadline) {
			t.Fatalf("the allocation never went quiet")
		}
		alloc = info(t, client, id)
	}

	_, listMeta, err := allocs.List(nil)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	const wait = 2 * time.Minute
	type result struct {
		index   uint64
		elapsed time.Duration
		err     error
		alloc   *api.Allocation
	}
	var wg sync.WaitGroup
	var listed, read result
	start := time.Now()
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, meta, err := allocs.List(&api.QueryOptions{WaitIndex: listMeta.LastIndex, WaitTime: wait})
		listed = result{elapsed: time.Since(start), err: err}
		if err == nil {
			listed.index = meta.LastIndex
		}
	}()
	go func() {
		defer wg.Done()
		for index := alloc.ModifyIndex; ; index = read.index {
			found, meta, err := allocs.Info(id, &api.QueryOptions{WaitIndex: index, WaitTime: wait})
			read = result{elapsed: time.Since(start), err: err, alloc: found}
			if err != nil || meta.LastIndex <= index || signalledSince(found, start) {
				if err == nil {
					read.index = meta.LastIndex
				}
				return
			}
			read.index = meta.LastIndex
		}
	}()
	time.Sleep(2 * time.Second) // both queries are parked by now
	signalled := time.Since(start)
	if err := allocs.Signal(alloc, nil, "main", "SIGHUP"); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	wg.Wait()

	if listed.err != nil || listed.index <= listMeta.LastIndex || listed.elapsed > wait/2 {
		t.Fatalf("blocking List: %+v (asked for index > %d)", listed, listMeta.LastIndex)
	}
	if read.err != nil || read.index <= alloc.ModifyIndex || read.elapsed < signalled ||
		read.elapsed > wait/2 {
		t.Fatalf("blocking Info: %+v (asked for index > %d; signal sent at %v)",
			read, alloc.ModifyIndex, signalled)
	}
	if read.alloc.ModifyIndex != read.index || !signalledSince(read.alloc, start) {
		t.Fatalf("blocking Info: ModifyIndex %d, X-Nomad-Index %d, events %v", read.alloc.ModifyIndex,
			read.index, eventTypes(read.alloc.TaskStates["main"]))
	}
	t.Logf("List returned after %v, Info after %v; the signal went at %v",
		listed.elapsed, read.elapsed, signalled)
}

// TestServicesAndChecks: Services and Checks of an allocation with a group service on a
// reserved port and a TCP check. GOCLIENT_ALLOC is that allocation.
func TestServicesAndChecks(t *testing.T) {
	values := env(t, "GOCLIENT_ALLOC", "NOMAD_NAMESPACE")
	id, namespace := values[0], values[1]
	allocs := newClient(t).Allocations()

	var services []*api.ServiceRegistration
	eventually(t, "the service registration", func() (bool, string) {
		found, meta, err := allocs.Services(id, nil)
		services = found
		return err == nil && len(found) == 1 && meta.LastIndex > 0, fmt.Sprintf("%v %v", found, err)
	})
	service := services[0]
	if service.ServiceName != "admin" || service.Port != 9000 || service.AllocID != id ||
		service.Namespace != namespace || service.Address == "" || service.NodeID == "" ||
		!slices.Equal(service.Tags, []string{"ops", "v1"}) || service.ID == "" {
		t.Fatalf("Services: %+v", service)
	}

	checks, err := allocs.Checks(id, nil)
	if err != nil || len(checks) != 1 {
		t.Fatalf("Checks: %v, %v; want one result", checks, err)
	}
	for key, check := range checks {
		if key != check.ID || check.Check != "admin-port" || check.Service != "admin" ||
			check.Mode != "healthiness" || check.Timestamp == 0 ||
			!slices.Contains([]string{"success", "failure", "pending"}, check.Status) {
			t.Fatalf("Checks: %s: %+v", key, check)
		}
	}

	_, _, err = allocs.Services(unknownID, nil)
	wantResponse(t, "Services(unknown)", err, 404, "allocation not found", true)
	_, err = allocs.Checks(unknownID, nil)
	wantResponse(t, "Checks(unknown)", err, 404, fmt.Sprintf("Unknown allocation %q", unknownID), true)
}

// signalledSince: whether task "main" of the allocation has a Signaling event from `since` on
// (earlier tests may have signalled it before).
func signalledSince(alloc *api.Allocation, since time.Time) bool {
	if alloc == nil || alloc.TaskStates["main"] == nil {
		return false
	}
	for _, event := range alloc.TaskStates["main"].Events {
		if event.Type == api.TaskSignaling && event.Time >= since.UnixNano() {
			return true
		}
	}
	return false
}
