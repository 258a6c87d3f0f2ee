// Command gowalk times paging through allocbridge's /v1/allocations with a Go HTTP client,
// the kind of client the nomad CLI and the Go SDK are: one keep-alive connection, the next
// page asked for with X-Nomad-NextToken. Each walk and unpaged list is timed twice: with every
// body decoded as JSON (what the SDK does) and with bodies only read (the HTTP cost alone).
//
// Usage: gowalk -addr http://127.0.0.1:4646 -token T -per-page 100 -walks 5
// It prints one JSON object: {"decoded": {"walks": [s...], "unpaged": [s...]}, "raw": {...},
// "seen": N}. Walks and unpaged lists are interleaved so both see the same machine.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

type timings struct {
	Walks   []float64 `json:"walks"`
	Unpaged []float64 `json:"unpaged"`
}

type result struct {
	Decoded timings `json:"decoded"`
	Raw     timings `json:"raw"`
	Seen    int     `json:"seen"`
}

type stub struct {
	ID string `json:"ID"`
}

// get fetches one page; with decode false the body is read and its stubs only counted.
func get(client *http.Client, url, token string, decode bool) (int, string, error) {
	request, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	request.Header.Set("X-Nomad-Token", token)
	response, err := client.Do(request)
	if err != nil {
		return 0, "", err
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(response.Body)
		return 0, "", fmt.Errorf("GET %s: %d %s", url, response.StatusCode, body)
	}
	next := response.Header.Get("X-Nomad-NextToken")
	if !decode {
		body, err := io.ReadAll(response.Body)
		return bytes.Count(body, []byte(`"ID":`)), next, err
	}
	var page []stub
	if err := json.NewDecoder(response.Body).Decode(&page); err != nil {
		return 0, "", err
	}
	return len(page), next, nil
}

func walk(client *http.Client, base, token string, perPage int, decode bool) (int, error) {
	next, seen := "", 0
	for {
		url := fmt.Sprintf("%s&per_page=%d", base, perPage)
		if next != "" {
			url += "&next_token=" + next
		}
		count, following, err := get(client, url, token, decode)
		if err != nil {
			return seen, err
		}
		seen += count
		if following == "" {
			return seen, nil
		}
		next = following
	}
}

func main() {
	addr := flag.String("addr", "http://127.0.0.1:4646", "allocbridge API address")
	token := flag.String("token", "", "X-Nomad-Token")
	perPage := flag.Int("per-page", 100, "page size")
	walks := flag.Int("walks", 5, "walks (and unpaged lists) to time")
	flag.Parse()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
	base := *addr + "/v1/allocations?namespace=*&task_states=false"
	var out result
	if _, err := walk(client, base, *token, *perPage, true); err != nil { // warm the connection
		fail(err)
	}
	for i := 0; i < *walks; i++ {
		for _, decode := range []bool{true, false} {
			into := &out.Raw
			if decode {
				into = &out.Decoded
			}
			began := time.Now()
			seen, err := walk(client, base, *token, *perPage, decode)
			if err != nil {
				fail(err)
			}
			into.Walks = append(into.Walks, time.Since(began).Seconds())
			out.Seen = seen
			began = time.Now()
			listed, _, err := get(client, base, *token, decode)
			if err != nil {
				fail(err)
			}
			into.Unpaged = append(into.Unpaged, time.Since(began).Seconds())
			if listed != seen {
				fail(fmt.Errorf("the unpaged list has %d allocations, the walk saw %d", listed, seen))
			}
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
