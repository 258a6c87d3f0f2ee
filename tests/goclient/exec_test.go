package goclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// syncBuffer is a bytes.Buffer that the client's receiving goroutine may write while the test
// reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type execResult struct {
	code           int
	err            error
	stdout, stderr string
}

// execIn runs command in task the way `nomad alloc exec` does: Allocations().Exec, which first
// looks the allocation's node up (GET /v1/node/<NodeID>) and then opens the WebSocket.
func execIn(t *testing.T, client *api.Client, alloc *api.Allocation, task string, tty bool,
	command []string, stdin io.Reader, sizes <-chan api.TerminalSize) execResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr syncBuffer
	code, err := client.Allocations().Exec(ctx, alloc, task, tty, command,
		stdin, &stdout, &stderr, sizes, nil)
	return execResult{code: code, err: err, stdout: stdout.String(), stderr: stderr.String()}
}

// TestExec: Exec with stdout, stderr, stdin, exit codes, a TTY with a resize, and its errors.
// GOCLIENT_ALLOC is a running allocation with a docker task "main".
func TestExec(t *testing.T) {
	id := env(t, "GOCLIENT_ALLOC")[0]
	client := newClient(t)
	alloc := info(t, client, id)

	t.Run("stdout, stderr and exit code", func(t *testing.T) {
		got := execIn(t, client, alloc, "main", false,
			[]string{"sh", "-c", "echo to stdout; echo to stderr >&2; exit 3"},
			strings.NewReader(""), nil)
		if got.err != nil || got.code != 3 || got.stdout != "to stdout\n" || got.stderr != "to stderr\n" {
			t.Fatalf("got %+v", got)
		}
	})

	t.Run("exit code 0", func(t *testing.T) {
		got := execIn(t, client, alloc, "main", false, []string{"true"}, strings.NewReader(""), nil)
		if got.err != nil || got.code != 0 || got.stdout != "" || got.stderr != "" {
			t.Fatalf("got %+v", got)
		}
	})

	t.Run("stdin", func(t *testing.T) {
		// head ends after the bytes it was asked for: the local control plane's kubelet (kwok)
		// never passes the end of stdin on to an exec'd process (see cluster/podexec.py).
		input := strings.Repeat("line of stdin\n", 500) // several client frames
		command := fmt.Sprintf("head -c %d; echo done >&2", len(input))
		got := execIn(t, client, alloc, "main", false, []string{"sh", "-c", command},
			strings.NewReader(input), nil)
		if got.err != nil || got.code != 0 || got.stdout != input || got.stderr != "done\n" {
			t.Fatalf("got code %d, err %v, %d bytes of stdout (want %d), stderr %q",
				got.code, got.err, len(got.stdout), len(input), got.stderr)
		}
	})

	t.Run("tty with a resize", func(t *testing.T) {
		// The terminal stays open (a closed stdin would hang it up) until the command ends.
		stdin, keepOpen := io.Pipe()
		defer keepOpen.Close()
		sizes := make(chan api.TerminalSize, 1)
		sizes <- api.TerminalSize{Height: 33, Width: 101}
		got := execIn(t, client, alloc, "main", true,
			// The trailing sleep lets the local cluster's kubelet (kwok) drain the terminal
			// before the process exits; it may drop output written just before the end.
			[]string{"sh", "-c", "sleep 1; stty size; test -t 0 && echo is a tty; echo err >&2; sleep 1"},
			stdin, sizes)
		if got.err != nil || got.code != 0 {
			t.Fatalf("got %+v", got)
		}
		// A terminal turns \n into \r\n and carries stderr on stdout.
		want := "33 101\r\nis a tty\r\nerr\r\n"
		if got.stdout != want || got.stderr != "" {
			t.Fatalf("stdout %q (want %q), stderr %q", got.stdout, want, got.stderr)
		}
	})

	t.Run("unknown task", func(t *testing.T) {
		got := execIn(t, client, alloc, "ghost", false, []string{"true"}, strings.NewReader(""), nil)
		if got.err == nil || got.code != -2 || !strings.Contains(got.err.Error(), `unknown task name "ghost"`) {
			t.Fatalf("got %+v", got)
		}
		t.Logf("the client reports %q", got.err)
	})

	t.Run("command not found", func(t *testing.T) {
		got := execIn(t, client, alloc, "main", false, []string{"no-such-command-here"}, strings.NewReader(""), nil)
		if got.err == nil && got.code == 0 {
			t.Fatalf("got %+v; want an error or a non-zero exit code", got)
		}
		t.Logf("the client reports code %d, error %v, stderr %q", got.code, got.err, got.stderr)
	})

	t.Run("unknown allocation", func(t *testing.T) {
		ghost := &api.Allocation{ID: unknownID, NodeID: alloc.NodeID}
		got := execIn(t, client, ghost, "main", false, []string{"true"}, strings.NewReader(""), nil)
		want := fmt.Sprintf("Unknown allocation %q", unknownID)
		if got.err == nil || got.code != -2 || !strings.Contains(got.err.Error(), want) {
			t.Fatalf("got %+v", got)
		}
	})
}
