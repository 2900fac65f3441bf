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
	"time"
)

// The live arm's streams are held by a process of their own: the harness
// run again with -hold-streams. Held in the harness's own process, the
// 1,951 readers woke in hundreds on each batch's message and the victim's
// load generator, in the same Go runtime, waited behind them for a
// processor: a delay of the harness's, counted as the victim's. So did the
// 50 streams it timed, decoding each message's row ids: with them read in
// the harness, the victim measured x2.52 and x2.87 its baseline p99 in two
// -only live runs; with 2 of them, x1.80 and x1.84, the server's work the
// same (0.38-0.39 cores). Clients hold their streams on machines of their
// own; a process of their own is the nearest the harness gets on the
// server's machine, with the kernel, not one scheduler, sharing the cores
// between the readers and the victim. The holder times the writer's
// streams too, and reports each batch's delay when it is told the batches.

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
	Track   int    `json:"track"` // of N, how many the holder reads and times
}

// holdBatch is one of the writer's batches: its first row, and when its
// write was answered, Unix µs.
type holdBatch struct {
	First string `json:"first"`
	At    int64  `json:"at_us"`
}

// holdReport is a line the holder writes on its standard output: once its
// streams are open, and once they are closed.
type holdReport struct {
	Opened  int64 `json:"opened"`
	Refused int64 `json:"refused"`
	Ended   int64 `json:"ended_early"`
	Tracked int64 `json:"tracked"` // streams read and timed
	// The last report's: each batch at each timed stream, µs from its
	// write's answer to the stream's being told of its first row, or of a
	// resync after the write; Missing, those it was told nothing of.
	Delays  []int64 `json:"delays_us,omitempty"`
	Missing int64   `json:"missing,omitempty"`
	Resyncs int64   `json:"resyncs,omitempty"`
}

// holdStreams is the holder: it opens the streams its standard input
// describes, reports, reads the writer's batches from its standard input,
// waits until it closes, then reports again (how many streams had ended
// before, and each batch's delay at each timed stream) and returns.
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
	var timed []*liveStream
	for _, set := range spec.Sets {
		t := &tenant{Token: set.Token, TableID: set.TableID}
		for i := range set.N {
			s, code, err := openLive(ctx, client, spec.Base, t, i < set.Track, &ended)
			switch {
			case err != nil:
				fmt.Fprintln(os.Stderr, "live: holding a stream:", err)
				r.Refused++
			case code != 200:
				r.Refused++
			default:
				r.Opened++
				if i < set.Track {
					timed = append(timed, s)
				}
			}
		}
	}
	r.Tracked = int64(len(timed))
	enc := json.NewEncoder(out)
	if err := enc.Encode(r); err != nil {
		return err
	}
	var batches []holdBatch
	if err := dec.Decode(&batches); err != nil && err != io.EOF {
		return fmt.Errorf("reading the batches: %w", err)
	}
	for _, s := range timed {
		s.delays(batches, &r)
	}
	_, _ = io.Copy(io.Discard, dec.Buffered())
	_, _ = io.Copy(io.Discard, in) // until the harness closes it
	r.Ended = ended.Load()
	cancel()
	return enc.Encode(r)
}

// delays adds each batch's delay at s to r: until s was told of its first
// row, or of a resync after its write (then the client reloads, which
// counts as told); a batch it was told nothing of is missing.
func (s *liveStream) delays(batches []holdBatch, r *holdReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decode()
	for _, b := range batches {
		at := time.UnixMicro(b.At)
		seen, ok := s.seen[b.First]
		if !ok {
			for _, t := range s.resyncs {
				if t.After(at.Add(-time.Second)) {
					seen, ok = t, true
					r.Resyncs++
					break
				}
			}
		}
		if !ok {
			r.Missing++
			continue
		}
		r.Delays = append(r.Delays, max(0, seen.Sub(at).Microseconds()))
	}
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
	h.out.Buffer(make([]byte, 0, 64<<10), 64<<20) // the last report holds every delay
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

// close tells the holder the writer's batches, closes its streams and
// returns its last report.
func (h *holder) close(batches []holdBatch) (holdReport, error) {
	if err := json.NewEncoder(h.stdin).Encode(batches); err != nil {
		h.kill()
		return holdReport{}, err
	}
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
