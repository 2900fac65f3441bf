package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync/atomic"
)

// The live arm's held streams, those whose events the harness does not time,
// are held by a process of their own: the harness run again with
// -hold-streams. Held in the harness's own process, the 1,951 readers woke
// in hundreds on each batch's message and the victim's load generator, in
// the same Go runtime, waited behind them for a processor: a delay of the
// harness's, counted as the victim's. Clients hold their streams on
// machines of their own; a process of their own is the nearest the harness
// gets on the server's machine, with the kernel, not one scheduler, sharing
// the cores between the readers and the victim.

// holdSpec is what the holder is told on its standard input.
type holdSpec struct {
	Base string    `json:"base"`
	Sets []holdSet `json:"sets"`
}

// holdSet is n streams of one realm's table.
type holdSet struct {
	Token   string `json:"token"`
	TableID string `json:"table_id"`
	N       int    `json:"n"`
}

// holdReport is a line the holder writes on its standard output: once its
// streams are open, and once they are closed.
type holdReport struct {
	Opened  int64 `json:"opened"`
	Refused int64 `json:"refused"`
	Ended   int64 `json:"ended_early"`
}

// holdStreams is the holder: it opens the streams its standard input
// describes, reports, drains them until its standard input closes, then
// reports again (how many had ended before) and returns.
func holdStreams(in io.Reader, out io.Writer) error {
	dec := json.NewDecoder(in)
	var spec holdSpec
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("reading what to hold: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 1, DisableCompression: true}}
	var r holdReport
	var ended atomic.Int64
	for _, set := range spec.Sets {
		t := &tenant{Token: set.Token, TableID: set.TableID}
		for range set.N {
			_, code, err := openLive(ctx, client, spec.Base, t, false, &ended)
			switch {
			case err != nil:
				fmt.Fprintln(os.Stderr, "live: holding a stream:", err)
				r.Refused++
			case code != 200:
				r.Refused++
			default:
				r.Opened++
			}
		}
	}
	enc := json.NewEncoder(out)
	if err := enc.Encode(r); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, dec.Buffered())
	_, _ = io.Copy(io.Discard, in) // until the harness closes it
	r.Ended = ended.Load()
	cancel()
	return enc.Encode(r)
}

// holder is a running holder process.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// holdElsewhere starts a holder for sets on base and waits until it has
// opened them.
func holdElsewhere(base string, sets []holdSet) (*holder, holdReport, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, holdReport{}, err
	}
	cmd := exec.Command(exe, "-hold-streams")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, holdReport{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, holdReport{}, err
	}
	if err := cmd.Start(); err != nil {
		return nil, holdReport{}, err
	}
	h := &holder{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	if err := json.NewEncoder(stdin).Encode(holdSpec{Base: base, Sets: sets}); err != nil {
		h.kill()
		return nil, holdReport{}, err
	}
	r, err := h.report()
	if err != nil {
		h.kill()
		return nil, holdReport{}, err
	}
	return h, r, nil
}

// report reads the holder's next report.
func (h *holder) report() (holdReport, error) {
	var r holdReport
	if !h.out.Scan() {
		if err := h.out.Err(); err != nil {
			return r, err
		}
		return r, fmt.Errorf("the stream holder ended without a report")
	}
	return r, json.Unmarshal(h.out.Bytes(), &r)
}

// close closes the holder's streams and returns its last report.
func (h *holder) close() (holdReport, error) {
	_ = h.stdin.Close()
	r, err := h.report()
	if werr := h.cmd.Wait(); err == nil {
		err = werr
	}
	return r, err
}

func (h *holder) kill() {
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}
