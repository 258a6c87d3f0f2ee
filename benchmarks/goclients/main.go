// Command goclients times allocbridge with Go clients, the kind of client the nomad CLI is:
//
//	goclients walk -addr URL -token T -per-page 100 -walks 5
//	goclients exec -addr URL -token T -alloc ID -task main -bytes N -runs 3
//	goclients load -url URL [-token T | -ca F -cert F -key F] -clients 4 -seconds 5
//	goclients shell -addr URL -token T -alloc ID -task main -command '["sh"]'
//	goclients forward -to HOST:PORT
//
// Each prints one JSON object on stdout (see walk.go, exec.go and load.go for its shape), but
// shell, whose stdin and stdout are a terminal's (shell.go), and forward, which prints the port
// it listens on and runs until killed (forward.go).
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/hashicorp/nomad/api"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: goclients walk|exec|load|shell|forward [flags]"))
	}
	var out any
	var err error
	switch os.Args[1] {
	case "walk":
		out, err = runWalk(os.Args[2:])
	case "exec":
		out, err = runExec(os.Args[2:])
	case "load":
		out, err = runLoad(os.Args[2:])
	case "shell":
		err = runShell(os.Args[2:])
	case "forward":
		err = runForward(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want walk, exec, load, shell or forward", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

// sdkClient is the official Nomad Go client on addr with token, as the nomad CLI builds it.
func sdkClient(addr, token string) (*api.Client, error) {
	config := api.DefaultConfig()
	config.Address = addr
	config.SecretID = token
	return api.NewClient(config)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
