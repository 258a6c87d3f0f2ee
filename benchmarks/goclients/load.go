package main

// load drives one URL with closed-loop clients: each sends its next GET as soon as its last is
// answered, on a keep-alive HTTP/1.1 connection of its own, for a number of seconds or until it
// has sent -requests (after a few unrecorded warm-up requests per client). Every request is timed to its body's last byte;
// bodies are read and discarded, not decoded. The same command drives allocbridge (a token)
// and the API server (a client certificate), so both sides pay the same client.
// Output: {"seconds": s, "latencies": [s...], "bytes": last body's size}.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

type loadResult struct {
	Seconds   float64   `json:"seconds"`
	Latencies []float64 `json:"latencies"`
	Bytes     int64     `json:"bytes"`
}

func runLoad(args []string) (any, error) {
	flags := flag.NewFlagSet("load", flag.ExitOnError)
	url := flags.String("url", "", "the URL to GET")
	token := flags.String("token", "", "X-Nomad-Token (empty: none)")
	ca := flags.String("ca", "", "CA certificate file for https")
	cert := flags.String("cert", "", "client certificate file for https")
	key := flags.String("key", "", "client key file for https")
	clients := flags.Int("clients", 4, "concurrent clients, one connection each")
	seconds := flags.Float64("seconds", 5, "seconds of load")
	warmup := flags.Int("warmup", 2, "unrecorded requests per client first")
	requests := flags.Int("requests", 0, "requests per client at most (0: as many as fit)")
	_ = flags.Parse(args)
	if *url == "" || *clients < 1 {
		return nil, errors.New("load needs -url and at least one client")
	}
	tlsConfig, err := clientTLS(*ca, *cert, *key)
	if err != nil {
		return nil, err
	}
	getters := make([]getter, *clients)
	for i := range getters {
		getters[i] = newGetter(*url, *token, tlsConfig)
	}
	var last int64
	for _, get := range getters {
		for i := 0; i < *warmup; i++ {
			if last, err = get(); err != nil {
				return nil, err
			}
		}
	}
	deadline := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	times := make([][]float64, *clients)
	failures := make([]error, *clients)
	var group sync.WaitGroup
	began := time.Now()
	for i, get := range getters {
		group.Add(1)
		go func() {
			defer group.Done()
			for time.Now().Before(deadline) && (*requests == 0 || len(times[i]) < *requests) {
				start := time.Now()
				if _, err := get(); err != nil {
					failures[i] = err
					return
				}
				times[i] = append(times[i], time.Since(start).Seconds())
			}
		}()
	}
	group.Wait()
	out := loadResult{Seconds: time.Since(began).Seconds(), Bytes: last}
	if err := errors.Join(failures...); err != nil {
		return nil, err
	}
	for _, series := range times {
		out.Latencies = append(out.Latencies, series...)
	}
	return out, nil
}

// getter sends one GET and returns the body's size; an answer other than 200 is an error.
type getter func() (int64, error)

func newGetter(url, token string, tlsConfig *tls.Config) getter {
	transport := &http.Transport{
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true,
		TLSClientConfig:     tlsConfig,
		// HTTP/1.1 on both sides, as every other client of the suite speaks.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	client := &http.Client{Transport: transport}
	buffer := make([]byte, 256<<10)
	return func() (int64, error) {
		request, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		if token != "" {
			request.Header.Set("X-Nomad-Token", token)
		}
		response, err := client.Do(request)
		if err != nil {
			return 0, err
		}
		defer response.Body.Close()
		if response.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(response.Body, 200))
			return 0, fmt.Errorf("GET %s: %d %s", url, response.StatusCode, body)
		}
		return drain(response.Body, buffer)
	}
}

// drain reads body to its end in large reads and returns its size: io.Copy into io.Discard
// reads 8 KB at a time, a system call per 8 KB of a 40 MB list.
func drain(body io.Reader, buffer []byte) (int64, error) {
	var size int64
	for {
		n, err := body.Read(buffer)
		size += int64(n)
		if err == io.EOF {
			return size, nil
		}
		if err != nil {
			return size, err
		}
	}
}

// clientTLS is nil for plain http, else a config trusting ca and presenting cert and key.
func clientTLS(ca, cert, key string) (*tls.Config, error) {
	if ca == "" && cert == "" {
		return nil, nil
	}
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", ca)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}, nil
}
