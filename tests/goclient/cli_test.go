package goclient

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestLogsJobsAndStats: what `nomad alloc logs` (AllocFS().Logs), its `-job` form
// (Jobs().PrefixList, Jobs().Allocations) and `nomad alloc status` (Allocations().Stats) call.
// GOCLIENT_ALLOC is an allocation of job GOCLIENT_JOB whose task `main` logs GOCLIENT_LOG
// (its stdout, as kwok serves it); GOCLIENT_STATS_ERROR is part of the stats call's error
// text (kwok's nodes serve no stats).
func TestLogsJobsAndStats(t *testing.T) {
	vars := env(t, "GOCLIENT_ALLOC", "GOCLIENT_JOB", "GOCLIENT_LOG", "GOCLIENT_STATS_ERROR")
	id, jobID, want, statsError := vars[0], vars[1], vars[2], vars[3]
	client := newClient(t)
	alloc := info(t, client, id)
	if alloc.Job == nil || alloc.Job.LookupTaskGroup(alloc.TaskGroup) == nil {
		t.Fatalf("Info: the allocation's Job has no group %q: %+v", alloc.TaskGroup, alloc.Job)
	}

	t.Run("Logs", func(t *testing.T) {
		cancel := make(chan struct{})
		defer close(cancel)
		frames, errs := client.AllocFS().Logs(alloc, false, "main", "stdout", "start", 0, cancel, nil)
		var got strings.Builder
		deadline := time.After(pollTimeout)
	read:
		for {
			select {
			case frame, ok := <-frames:
				if !ok {
					break read
				}
				if frame != nil && frame.File != "" && frame.File != "alloc/logs/main.stdout.0" {
					t.Fatalf("Logs: frame of file %q", frame.File)
				}
				if frame != nil {
					got.Write(frame.Data)
				}
			case err := <-errs:
				if err != nil {
					t.Fatalf("Logs: %v", err)
				}
			case <-deadline:
				t.Fatalf("Logs: no end of the log after %v (so far %q)", pollTimeout, got.String())
			}
		}
		if got.String() != want {
			t.Fatalf("Logs: got %q, want %q", got.String(), want)
		}
	})

	t.Run("Tail", func(t *testing.T) {
		cancel := make(chan struct{})
		defer close(cancel)
		frames, errs := client.AllocFS().Logs(alloc, false, "main", "stdout", "end", 5, cancel, nil)
		var got strings.Builder
		for frame := range frames {
			got.Write(frame.Data)
		}
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("Logs from the end: %v", err)
			}
		default:
		}
		if got.String() != want[len(want)-5:] {
			t.Fatalf("Logs from the end: got %q, want %q", got.String(), want[len(want)-5:])
		}
	})

	t.Run("JobPrefix", func(t *testing.T) {
		jobs, _, err := client.Jobs().PrefixList(jobID[:len(jobID)-1])
		if err != nil {
			t.Fatalf("Jobs().PrefixList: %v", err)
		}
		var found *api.JobListStub
		for _, job := range jobs {
			if job.ID == jobID {
				found = job
			}
		}
		if found == nil || found.Status != "running" || found.Type != "service" {
			t.Fatalf("Jobs().PrefixList: no running service job %q in %+v", jobID, jobs)
		}
		stubs, _, err := client.Jobs().Allocations(jobID, false, nil)
		if err != nil {
			t.Fatalf("Jobs().Allocations: %v", err)
		}
		if got := ids(stubs); len(got) != 1 || got[0] != id {
			t.Fatalf("Jobs().Allocations: got %v, want [%s]", got, id)
		}
	})

	t.Run("Stats", func(t *testing.T) {
		_, err := client.Allocations().Stats(alloc, nil)
		if err == nil || !strings.Contains(err.Error(), statsError) {
			t.Fatalf("Stats: got %v, want an error with %q", err, statsError)
		}
	})
}
