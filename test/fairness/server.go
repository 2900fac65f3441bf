package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// stack is what the harness made for one run: a binary, a database, and the
// server processes it starts on them.
type stack struct {
	bin      string
	adminURL string
	dbName   string
	dbURL    string
	redisURL string
	logDir   string
}

// buildBinary compiles the real appdor command.
func buildBinary(dir string) (string, error) {
	bin := filepath.Join(dir, "appdor")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/appdor")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/appdor: %w", err)
	}
	return bin, nil
}

func withDatabase(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// createDatabase makes a fresh, empty database; the server migrates it.
func (s *stack) createDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		return fmt.Errorf("APPDOR_TEST_DATABASE_URL: %w", err)
	}
	defer conn.Close(ctx)
	s.dbName = fmt.Sprintf("appdor_storm_%d", time.Now().UnixNano()%1_000_000_000)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+s.dbName); err != nil {
		return err
	}
	s.dbURL, err = withDatabase(s.adminURL, s.dbName)
	return err
}

func (s *stack) dropDatabase() {
	if s.dbName == "" {
		return
	}
	if *keep {
		fmt.Println("harness: database kept:", s.dbName)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness: dropping database:", err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+s.dbName+" WITH (FORCE)"); err != nil {
		fmt.Fprintln(os.Stderr, "harness: dropping database:", err)
	}
}

// cli runs one admin command and decodes its line of JSON.
func (s *stack) cli(ctx context.Context, args ...string) (map[string]any, error) {
	cmd := exec.CommandContext(ctx, s.bin, append(args, "--database-url", s.dbURL)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("appdor %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	var v map[string]any
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		return nil, fmt.Errorf("appdor %s printed %q: %w", args[0], out.String(), err)
	}
	return v, nil
}

// errServerDied: a server the harness was measuring exited. serverDied
// cancels the run with it, so that the arms stop at once instead of
// driving their load at a closed port (one run whose server was killed
// went on for ten minutes at 69% of a core, its errors reaching 6.9 GB).
var (
	errServerDied                         = errors.New("appdor serve exited while the harness measured it")
	serverDied    context.CancelCauseFunc = func(error) {}
)

// server is one running appdor process.
type server struct {
	cmd      *exec.Cmd
	base     string
	log      *os.File
	exited   chan struct{} // closed when the process has exited
	ready    atomic.Bool
	stopping atomic.Bool
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs `appdor serve` with extra environment and waits until /readyz
// answers 200.
func (s *stack) start(ctx context.Context, name string, env ...string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(s.logDir, "server-"+name+".log"))
	if err != nil {
		return nil, err
	}
	// The servers log at warn (a line per refusal episode) unless the
	// harness runs with APPDOR_LOG_LEVEL set, e.g. debug to see each realm
	// the controller finds backlogged.
	level := os.Getenv("APPDOR_LOG_LEVEL")
	if level == "" {
		level = "warn"
	}
	cmd := exec.Command(s.bin, "serve")
	cmd.Env = append(os.Environ(),
		"APPDOR_DATABASE_URL="+s.dbURL,
		"APPDOR_REDIS_URL="+s.redisURL,
		fmt.Sprintf("APPDOR_LISTEN=127.0.0.1:%d", port),
		"APPDOR_LOG_LEVEL="+level,
		// The automation-storm scenario's webhook sink is on loopback.
		"APPDOR_WEBHOOK_ALLOW_CIDRS=127.0.0.1/32",
		// The live arm's realms open their streams with one token each: the
		// realm's cap (500) is the one it fills, not a person's.
		"APPDOR_LIVE_STREAMS_PER_USER=500",
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	srv := &server{cmd: cmd, base: fmt.Sprintf("http://127.0.0.1:%d", port), log: logf, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if srv.ready.Load() && !srv.stopping.Load() {
			serverDied(fmt.Errorf("%w: %s (%v); see %s:\n%s", errServerDied, name, err, logf.Name(), tail(logf.Name(), 20)))
		}
		close(srv.exited)
	}()
	deadline := time.Now().Add(60 * time.Second)
wait:
	for time.Now().Before(deadline) {
		res, err := http.Get(srv.base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				srv.ready.Store(true)
				return srv, nil
			}
		}
		select {
		case <-srv.exited:
			break wait
		case <-time.After(100 * time.Millisecond):
		}
	}
	srv.stop()
	return nil, fmt.Errorf("appdor serve (%s) did not become ready; see %s:\n%s", name, logf.Name(), tail(logf.Name(), 20))
}

func (srv *server) stop() {
	if srv == nil || srv.cmd.Process == nil {
		return
	}
	srv.stopping.Store(true)
	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-srv.exited:
	case <-time.After(15 * time.Second):
		_ = srv.cmd.Process.Kill()
		<-srv.exited
	}
	srv.log.Close()
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
