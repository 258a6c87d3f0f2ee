package goclient

import (
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestAllocFSRealNode: what `nomad alloc fs`, `nomad alloc logs -f` and `nomad alloc status`
// call, on the real node. GOCLIENT_ALLOC runs tests/cluster/scripted.py's files_task as task
// `main` of job GOCLIENT_JOB: its files under alloc/data and main/local, and `out N` on stdout
// and `err N` on stderr each second.
func TestAllocFSRealNode(t *testing.T) {
	vars := env(t, "GOCLIENT_ALLOC", "GOCLIENT_JOB")
	id, jobID := vars[0], vars[1]
	client := newClient(t)
	alloc := info(t, client, id)
	fs := client.AllocFS()

	t.Run("Stat", func(t *testing.T) {
		file, _, err := fs.Stat(alloc, "alloc/data/hello.txt", nil)
		if err != nil {
			t.Fatalf("Stat: %v", err)
		}
		if file.Name != "hello.txt" || file.IsDir || file.Size != 6 || file.FileMode != "-rw-r--r--" ||
			file.ContentType != "text/plain; charset=utf-8" || file.ModTime.IsZero() ||
			time.Since(file.ModTime) > time.Hour {
			t.Fatalf("Stat: %+v", file)
		}
		_, _, err = fs.Stat(alloc, "alloc/missing", nil)
		wantResponse(t, "Stat of a missing file", err, 404,
			"stat alloc/missing: no such file or directory", true)
		_, _, err = fs.Stat(alloc, "main/local/passwd", nil)
		wantResponse(t, "Stat through a symlink out of local/", err, 400,
			"Path escapes the alloc directory", true)
	})

	t.Run("List", func(t *testing.T) {
		root, _, err := fs.List(alloc, "/", nil)
		if err != nil {
			t.Fatalf("List(/): %v", err)
		}
		if got := fileNames(root); strings.Join(got, ",") != "alloc,main" {
			t.Fatalf("List(/): %v", got)
		}
		files, _, err := fs.List(alloc, "alloc/data", nil)
		if err != nil {
			t.Fatalf("List(alloc/data): %v", err)
		}
		byName := map[string]*api.AllocFileInfo{}
		for _, file := range files {
			byName[file.Name] = file
		}
		if f := byName["hello.txt"]; f == nil || f.Size != 6 || f.IsDir {
			t.Fatalf("List(alloc/data): hello.txt is %+v in %v", f, fileNames(files))
		}
		if f := byName["link"]; f == nil || f.FileMode != "Lrwxrwxrwx" {
			t.Fatalf("List(alloc/data): link is %+v", f)
		}
		_, _, err = fs.List(alloc, "alloc/../..", nil)
		wantResponse(t, "List above the allocation directory", err, 400,
			"Path escapes the alloc directory", true)
	})

	t.Run("Cat", func(t *testing.T) {
		reader, err := fs.Cat(alloc, "alloc/data/hello.txt", nil)
		if err != nil {
			t.Fatalf("Cat: %v", err)
		}
		if got := readAll(t, reader); got != "hello\n" {
			t.Fatalf("Cat: got %q", got)
		}
	})

	t.Run("ReadAt", func(t *testing.T) {
		reader, err := fs.ReadAt(alloc, "main/local/digits.txt", 3, 4, nil)
		if err != nil {
			t.Fatalf("ReadAt: %v", err)
		}
		if got := readAll(t, reader); got != "3456" {
			t.Fatalf("ReadAt(3, 4): got %q", got)
		}
		reader, err = fs.ReadAt(alloc, "main/local/digits.txt", 8, -1, nil) // the CLI's tail
		if err != nil {
			t.Fatalf("ReadAt: %v", err)
		}
		if got := readAll(t, reader); got != "89" {
			t.Fatalf("ReadAt(8, -1): got %q", got)
		}
	})

	t.Run("Stream", func(t *testing.T) {
		cancel := make(chan struct{})
		defer close(cancel)
		frames, errs := fs.Stream(alloc, "alloc/data/grow.log", "end", 0, cancel, nil)
		got := collect(t, frames, errs, "alloc/data/grow.log", func(s string) bool {
			return strings.Count(s, "\n") >= 2
		})
		if !regexp.MustCompile(`^line \d+\nline \d+\n`).MatchString(got) {
			t.Fatalf("Stream: got %q, want new whole lines", got)
		}
	})

	for _, logType := range []string{"stdout", "stderr"} {
		t.Run("Logs-"+logType, func(t *testing.T) {
			word := map[string]string{"stdout": "out", "stderr": "err"}[logType]
			other := map[string]string{"stdout": "err", "stderr": "out"}[logType]
			file := "alloc/logs/main." + logType + ".0"
			// From the start, following: the first lines, then new ones as they come.
			cancel := make(chan struct{})
			frames, errs := fs.Logs(alloc, true, "main", logType, "start", 0, cancel, nil)
			got := collect(t, frames, errs, file, func(s string) bool {
				return strings.Count(s, "\n") >= 3
			})
			close(cancel)
			if !strings.HasPrefix(got, word+" 1\n"+word+" 2\n"+word+" 3\n") || strings.Contains(got, other) {
				t.Fatalf("Logs(%s, follow, start): got %q", logType, got)
			}
			// From the end, following: only lines written from now on.
			cancel = make(chan struct{})
			frames, errs = fs.Logs(alloc, true, "main", logType, "end", 0, cancel, nil)
			got = collect(t, frames, errs, file, func(s string) bool {
				return strings.Count(s, "\n") >= 2
			})
			close(cancel)
			first := regexp.MustCompile(`^` + word + ` (\d+)\n`).FindStringSubmatch(got)
			if first == nil || first[1] == "1" || strings.Contains(got, other) {
				t.Fatalf("Logs(%s, follow, end): got %q", logType, got)
			}
		})
	}

	t.Run("Stats", func(t *testing.T) {
		var usage *api.AllocResourceUsage
		eventually(t, "the kubelet to report the task's usage", func() (bool, string) {
			found, err := client.Allocations().Stats(alloc, nil)
			if err != nil {
				return false, err.Error()
			}
			usage = found
			task := found.Tasks["main"]
			ok := task != nil && task.ResourceUsage != nil &&
				task.ResourceUsage.MemoryStats != nil &&
				(task.ResourceUsage.MemoryStats.RSS > 0 || task.ResourceUsage.MemoryStats.Usage > 0)
			encoded, _ := json.Marshal(found)
			return ok, string(encoded)
		})
		if usage.ResourceUsage == nil || usage.ResourceUsage.CpuStats == nil ||
			len(usage.ResourceUsage.MemoryStats.Measured) == 0 || usage.Timestamp == 0 {
			t.Fatalf("Stats: %+v", usage)
		}
	})

	t.Run("JobPrefix", func(t *testing.T) {
		jobs, _, err := client.Jobs().PrefixList(jobID[:3])
		if err != nil {
			t.Fatalf("Jobs().PrefixList: %v", err)
		}
		found := false
		for _, job := range jobs {
			found = found || job.ID == jobID
		}
		if !found {
			t.Fatalf("Jobs().PrefixList(%q): no job %q in %+v", jobID[:3], jobID, jobs)
		}
	})
}

func fileNames(files []*api.AllocFileInfo) []string {
	names := make([]string, 0, len(files))
	for _, file := range files {
		names = append(names, file.Name)
	}
	return names
}

func readAll(t *testing.T, reader io.ReadCloser) string {
	t.Helper()
	defer reader.Close()
	data, err := io.ReadAll(reader)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return string(data)
}

// collect reads frames of file until enough(data so far) or pollTimeout.
func collect(t *testing.T, frames <-chan *api.StreamFrame, errs <-chan error, file string,
	enough func(string) bool) string {
	t.Helper()
	var got strings.Builder
	deadline := time.After(pollTimeout)
	for !enough(got.String()) {
		select {
		case frame, ok := <-frames:
			if !ok {
				t.Fatalf("the stream ended early with %q", got.String())
			}
			if frame.File != "" && frame.File != file {
				t.Fatalf("a frame of file %q, want %q", frame.File, file)
			}
			got.Write(frame.Data)
		case err := <-errs:
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
		case <-deadline:
			t.Fatalf("timed out after %v with %q", pollTimeout, got.String())
		}
	}
	return got.String()
}
