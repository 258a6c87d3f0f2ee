package main

// shell is `nomad alloc exec -t` without the CLI's flags and escape character: the official
// SDK's Allocations().Exec with a terminal (tty=true), its stdin and stdout this process's,
// and the terminal's size sent once at the start, as the CLI sends its terminal's. The bench
// runs it on a pseudo-terminal in raw mode, as it runs `kubectl exec -it`, so both sides of
// the interactive section are a Go client on a terminal. It exits with the command's exit
// code and prints nothing of its own on stdout (that is the terminal).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/hashicorp/nomad/api"
)

func runShell(args []string) error {
	flags := flag.NewFlagSet("shell", flag.ExitOnError)
	addr := flags.String("addr", "http://127.0.0.1:4646", "allocbridge API address")
	token := flags.String("token", "", "X-Nomad-Token")
	allocID := flags.String("alloc", "", "allocation ID")
	task := flags.String("task", "main", "task name")
	command := flags.String("command", `["sh"]`, "the command, a JSON array of strings")
	_ = flags.Parse(args)

	var argv []string
	if err := json.Unmarshal([]byte(*command), &argv); err != nil {
		return fmt.Errorf("-command: %w", err)
	}
	size, err := terminalSize(os.Stdin)
	if err != nil {
		return fmt.Errorf("stdin is not a terminal: %w", err)
	}
	client, err := sdkClient(*addr, *token)
	if err != nil {
		return err
	}
	alloc, _, err := client.Allocations().Info(*allocID, nil)
	if err != nil {
		return err
	}
	sizes := make(chan api.TerminalSize, 1)
	sizes <- size
	code, err := client.Allocations().Exec(context.Background(), alloc, *task, true, argv,
		os.Stdin, os.Stdout, os.Stderr, sizes, nil)
	if err != nil {
		return err
	}
	os.Exit(code)
	return nil
}

// terminalSize is the size of the terminal on f (TIOCGWINSZ).
func terminalSize(f *os.File) (api.TerminalSize, error) {
	var size struct{ rows, cols, x, y uint16 }
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), uintptr(syscall.TIOCGWINSZ),
		uintptr(unsafe.Pointer(&size)))
	if errno != 0 {
		return api.TerminalSize{}, errno
	}
	return api.TerminalSize{Height: int(size.rows), Width: int(size.cols)}, nil
}
