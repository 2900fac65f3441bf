// Command appdor runs Appdor, a self-hosted spreadsheet-database, and
// administers it: serve, migrate, realm, user, token, version.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts a graceful shutdown (serve drains, then
	// cancels); a second one ends the process at once.
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "appdor:", err)
		os.Exit(1)
	}
}
