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

// lister fetches one page (perPage 0: everything) and returns how to count its allocations
// and the next token. Counting is left for after the clock stops: checking that a walk saw
// everything is the benchmark's work, not the client's.
type lister func(perPage int, next string) (counter, string, error)

type counter func() int

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
	var out walkResult
	modes := []struct {
		list lister
		into *timings
	}{
		{sdkLister(sdk), &out.SDK},
		{rawLister(raw, *addr, *token), &out.Raw},
	}
	for _, mode := range modes { // warm the connections
		if _, err := walk(mode.list, *perPage); err != nil {
			return nil, err
		}
	}
	for i := 0; i < *walks; i++ {
		for _, mode := range modes {
			began := time.Now()
			pages, err := walk(mode.list, *perPage)
			if err != nil {
				return nil, err
			}
			mode.into.Walks = append(mode.into.Walks, time.Since(began).Seconds())
			seen := 0
			for _, page := range pages {
				seen += page()
			}
			out.Seen = seen
			began = time.Now()
			unpaged, _, err := mode.list(0, "")
			if err != nil {
				return nil, err
			}
			mode.into.Unpaged = append(mode.into.Unpaged, time.Since(began).Seconds())
			if listed := unpaged(); listed != seen {
				return nil, fmt.Errorf("the unpaged list has %d allocations, the walk saw %d", listed, seen)
			}
		}
	}
	return out, nil
}

// walk follows the next tokens to the end and returns each page's counter.
func walk(list lister, perPage int) ([]counter, error) {
	var pages []counter
	next := ""
	for {
		page, following, err := list(perPage, next)
		if err != nil {
			return nil, err
		}
		pages = append(pages, page)
		if following == "" {
			return pages, nil
		}
		next = following
	}
}

func sdkLister(client *api.Client) lister {
	return func(perPage int, next string) (counter, string, error) {
		stubs, meta, err := client.Allocations().List(&api.QueryOptions{
			Namespace: "*",
			Params:    map[string]string{"task_states": "false"},
			PerPage:   int32(perPage),
			NextToken: next,
		})
		if err != nil {
			return nil, "", err
		}
		return func() int { return len(stubs) }, meta.NextToken, nil
	}
}

// rawLister reads each body without decoding it; its stubs are counted by their "ID" keys.
func rawLister(client *http.Client, addr, token string) lister {
	return func(perPage int, next string) (counter, string, error) {
		url := addr + "/v1/allocations?namespace=*&task_states=false"
		if perPage > 0 {
			url += fmt.Sprintf("&per_page=%d", perPage)
		}
		if next != "" {
			url += "&next_token=" + next
		}
		request, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return nil, "", err
		}
		request.Header.Set("X-Nomad-Token", token)
		response, err := client.Do(request)
		if err != nil {
			return nil, "", err
		}
		defer response.Body.Close()
		body, err := readBody(response)
		if err != nil {
			return nil, "", err
		}
		if response.StatusCode != http.StatusOK {
			return nil, "", fmt.Errorf("GET %s: %d %s", url, response.StatusCode, body)
		}
		count := func() int { return bytes.Count(body, []byte(`"ID":`)) }
		return count, response.Header.Get("X-Nomad-NextToken"), nil
	}
}

// readBody reads a body into one buffer of its Content-Length, where io.ReadAll would start
// at 512 bytes and grow by copying: the raw mode measures HTTP, not the client's reallocations.
func readBody(response *http.Response) ([]byte, error) {
	var body bytes.Buffer
	if response.ContentLength > 0 {
		body.Grow(int(response.ContentLength) + bytes.MinRead)
	}
	_, err := body.ReadFrom(response.Body)
	return body.Bytes(), err
}
