package main

// exec times `nomad alloc exec`'s path: the official SDK's Allocations().Exec (which reads the
// allocation's node, then opens the WebSocket and decodes every frame), stdout counted and
// dropped. Each session is timed from the Exec call to its exit code. To tell the client's
// share from the server's, it also times the SDK's decoding alone: the same number of stdout
// frames as allocbridge sends them, unmarshalled from memory as the SDK does. Output:
// {"seconds": [s...], "decode_seconds": s}.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

type execResult struct {
	Seconds       []float64 `json:"seconds"`
	DecodeSeconds float64   `json:"decode_seconds"`
}

// byteCounter is an io.Writer that only counts.
type byteCounter struct{ n int64 }

func (c *byteCounter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

func runExec(args []string) (any, error) {
	flags := flag.NewFlagSet("exec", flag.ExitOnError)
	addr := flags.String("addr", "http://127.0.0.1:4646", "allocbridge API address")
	token := flags.String("token", "", "X-Nomad-Token")
	allocID := flags.String("alloc", "", "allocation ID")
	task := flags.String("task", "main", "task name")
	command := flags.String("command", "", "the command, a JSON array of strings")
	size := flags.Int64("bytes", 0, "stdout bytes the command writes")
	runs := flags.Int("runs", 1, "sessions to time")
	frame := flags.Int("frame", 32*1024, "stdout bytes per frame that allocbridge sends")
	_ = flags.Parse(args)

	var argv []string
	if err := json.Unmarshal([]byte(*command), &argv); err != nil {
		return nil, fmt.Errorf("-command: %w", err)
	}
	client, err := sdkClient(*addr, *token)
	if err != nil {
		return nil, err
	}
	alloc, _, err := client.Allocations().Info(*allocID, nil)
	if err != nil {
		return nil, err
	}
	var out execResult
	for i := 0; i < *runs; i++ {
		var stdout byteCounter
		var stderr strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		began := time.Now()
		code, err := client.Allocations().Exec(ctx, alloc, *task, false, argv,
			strings.NewReader(""), &stdout, &stderr, nil, nil)
		seconds := time.Since(began).Seconds()
		cancel()
		if err != nil {
			return nil, err
		}
		if code != 0 || stdout.n != *size {
			return nil, fmt.Errorf("exec: %d of %d bytes, exit code %d, stderr %q",
				stdout.n, *size, code, stderr.String())
		}
		out.Seconds = append(out.Seconds, seconds)
	}
	out.DecodeSeconds, err = decodeSeconds(*size, *frame)
	return out, err
}

// decodeSeconds times unmarshalling size bytes of stdout frames into the SDK's frame type.
func decodeSeconds(size int64, frameBytes int) (float64, error) {
	data := base64.StdEncoding.EncodeToString(make([]byte, frameBytes))
	text := []byte(`{"stdout":{"data":"` + data + `"}}`)
	began := time.Now()
	for done := int64(0); done < size; done += int64(frameBytes) {
		var frame api.ExecStreamingOutput
		if err := json.Unmarshal(text, &frame); err != nil {
			return 0, err
		}
	}
	return time.Since(began).Seconds(), nil
}
