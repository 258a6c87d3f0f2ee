package main

// walk times paging through /v1/allocations: one keep-alive connection, the next page asked
// for with X-Nomad-NextToken. Each walk and unpaged list is timed twice: through the official
// SDK (Allocations().List, every stub decoded: what the nomad CLI pays) and with net/http and
// the bodies only read (the HTTP cost alone). Walks and unpaged lists are interleaved so both
// see the same machine. Output: {"sdk": {"walks": [s...], "unpaged": [s...]}, "raw": {...},
// "seen": N}.

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hashicorp/nomad/api"
)

type timings struct {
	Walks   []float64 `json:"walks"`
	Unpaged []float64 `json:"unpaged"`
}

type walkResult struct {
	SDK  timings `json:"sdk"`
	Raw  timings `json:"raw"`
	Seen int     `json:"seen"`
}

// lister fetches one page (perPage 0: everything) and returns its size and the next token.
type lister func(perPage int, next string) (int, string, error)

func runWalk(args []string) (any, error) {
	flags := flag.NewFlagSet("walk", flag.ExitOnError)
	addr := flags.String("addr", "http://127.0.0.1:4646", "allocbridge API address")
	token := flags.String("token", "", "X-Nomad-Token")
	perPage := flags.Int("per-page", 100, "page size")
	walks := flags.Int("walks", 5, "walks (and unpaged lists) to time")
	_ = flags.Parse(args)

	sdk, err := sdkClient(*addr, *token)
	if err != nil {
		return nil, err
	}
	raw := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
	modes := []struct {
		list lister
		into *timings
	}{
		{sdkLister(sdk), nil},
		{rawLister(raw, *addr, *token), nil},
	}
	var out walkResult
	modes[0].into, modes[1].into = &out.SDK, &out.Raw
	if _, err := walk(modes[0].list, *perPage); err != nil { // warm the connections
		return nil, err
	}
	if _, err := walk(modes[1].list, *perPage); err != nil {
		return nil, err
	}
	for i := 0; i < *walks; i++ {
		for _, mode := range modes {
			began := time.Now()
			seen, err := walk(mode.list, *perPage)
			if err != nil {
				return nil, err
			}
			mode.into.Walks = append(mode.into.Walks, time.Since(began).Seconds())
			out.Seen = seen
			began = time.Now()
			listed, _, err := mode.list(0, "")
			if err != nil {
				return nil, err
			}
			mode.into.Unpaged = append(mode.into.Unpaged, time.Since(began).Seconds())
			if listed != seen {
				return nil, fmt.Errorf("the unpaged list has %d allocations, the walk saw %d", listed, seen)
			}
		}
	}
	return out, nil
}

func walk(list lister, perPage int) (int, error) {
	next, seen := "", 0
	for {
		count, following, err := list(perPage, next)
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

func sdkLister(client *api.Client) lister {
	return func(perPage int, next string) (int, string, error) {
		stubs, meta, err := client.Allocations().List(&api.QueryOptions{
			Namespace: "*",
			Params:    map[string]string{"task_states": "false"},
			PerPage:   int32(perPage),
			NextToken: next,
		})
		if err != nil {
			return 0, "", err
		}
		return len(stubs), meta.NextToken, nil
	}
}

// rawLister reads each body without decoding it and counts its stubs by their "ID" keys.
func rawLister(client *http.Client, addr, token string) lister {
	return func(perPage int, next string) (int, string, error) {
		url := addr + "/v1/allocations?namespace=*&task_states=false"
		if perPage > 0 {
			url += fmt.Sprintf("&per_page=%d", perPage)
		}
		if next != "" {
			url += "&next_token=" + next
		}
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
		body, err := io.ReadAll(response.Body)
		if err != nil {
			return 0, "", err
		}
		if response.StatusCode != http.StatusOK {
			return 0, "", fmt.Errorf("GET %s: %d %s", url, response.StatusCode, body)
		}
		return bytes.Count(body, []byte(`"ID":`)), response.Header.Get("X-Nomad-NextToken"), nil
	}
}
