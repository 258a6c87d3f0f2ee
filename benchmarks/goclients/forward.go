package main

// forward is a bare TCP forwarder: every connection accepted on 127.0.0.1 is joined to a new
// connection to -to, bytes copied both ways untouched (TLS passes through). It is one more
// process on a client's path, doing nothing else, so the interactive section can show what
// such a hop costs a keystroke on this machine. It prints its port, then forwards until killed.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
)

func runForward(args []string) error {
	flags := flag.NewFlagSet("forward", flag.ExitOnError)
	to := flags.String("to", "", "host:port to forward every connection to")
	_ = flags.Parse(args)
	if *to == "" {
		return errors.New("forward needs -to")
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(listener.Addr().(*net.TCPAddr).Port)
	for {
		client, err := listener.Accept()
		if err != nil {
			return err
		}
		go join(client, *to)
	}
}

// join copies both ways between client and a new connection to address, and closes both when
// either side ends. Go's net package sets TCP_NODELAY on both by default.
func join(client net.Conn, address string) {
	defer client.Close()
	upstream, err := net.Dial("tcp", address)
	if err != nil {
		return
	}
	defer upstream.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(upstream, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, upstream); done <- struct{}{} }()
	<-done
}
