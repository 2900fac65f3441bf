package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/appdor/appdor/fairness"
	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
)

// App is a running Appdor on this binary's database, served over real HTTP.
type App struct {
	*server.App
	URL     string
	Tenancy *tenancy.Service
	Config  server.Config
}

// Config is the configuration tests start Appdor with.
func Config(t testing.TB) server.Config {
	return server.Config{
		Listen: "127.0.0.1:0",
		// The server serves as a role bound by RLS that owns nothing, and
		// checks the schema's version as that role: the template is
		// migrated already.
		DatabaseURL: ServerURL(t),
		RedisURL:    RedisURL(t),
		Migrate:     false,
		DBMaxConns:  16,
		BodyLimit:   "10M",
		Version:     "test",
		// Parallel tests (under the race detector, too) make dozens of
		// realms at once on two cores; a request of theirs may wait longer
		// than the production wait bound without anything being wrong. The
		// bound itself is the controller's own tests' and the storm
		// harness's business.
		Fairness: fairness.Config{WaitBound: 2 * time.Second},
		// Parallel tests all come from 127.0.0.1, each with credentials new
		// to its server; the per-address ceiling on unknown credentials is
		// tested with its defaults (DefaultUnauthenticated) from addresses of
		// its own.
		UnauthenticatedPerSecond: 100_000,
		UnauthenticatedBurst:     100_000,
		// Likewise their sign-ins; the sign-in ceilings are tested with
		// their defaults from addresses of their own.
		LoginAddressPerMinute: 100_000,
		LoginAccountPerMinute: 100_000,
	}
}

// NewApp starts an Appdor with the test configuration, changed by mutate when
// given, and stops it when the test ends.
func NewApp(t testing.TB, mutate func(*server.Config)) *App {
	t.Helper()
	cfg := Config(t)
	if mutate != nil {
		mutate(&cfg)
	}
	// The server's log is kept, and shown when the test fails: a warning
	// of the server is often the reason.
	var out SyncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's log:\n%s", out.String())
		}
	})
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, err := server.New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		srv.Close()
		a.Close()
	})
	return &App{App: a, URL: srv.URL, Tenancy: tenancy.New(Pool(t)), Config: cfg}
}

// SyncBuffer is a bytes.Buffer a logger may write from many goroutines; it
// keeps the first 4 MiB.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 4<<20 { // a long test keeps its first 4 MiB
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var (
	sharedOnce sync.Once
	shared     *App
)

// SharedApp is one Appdor with the default test configuration, shared by the
// tests of this binary.
func SharedApp(t testing.TB) *App {
	t.Helper()
	sharedOnce.Do(func() {
		cfg := Config(t)
		a, err := server.New(context.Background(), cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(a.Handler())
		shared = &App{App: a, URL: srv.URL, Tenancy: tenancy.New(Pool(t)), Config: cfg}
	})
	if shared == nil {
		t.Fatal("the shared app failed to start")
	}
	return shared
}

// Tenant is a realm with one member and an API token for that member.
type Tenant struct {
	RealmID  uuid.UUID
	UserID   uuid.UUID
	Email    string
	Password string
	Role     tenancy.Role
	TokenID  uuid.UUID
	Token    string
}

// NewTenant makes a fresh realm with a member of role and a token; the
// token's ceiling is rpm when given.
func (a *App) NewTenant(t testing.TB, role tenancy.Role, rpm *int) Tenant {
	t.Helper()
	ctx := context.Background()
	r, err := a.Tenancy.CreateRealm(ctx, "realm "+uuid.NewString()[:8])
	if err != nil {
		t.Fatal(err)
	}
	return a.AddMember(t, r.ID, role, rpm)
}

// AddMember adds a new person with role to realm, with a token.
func (a *App) AddMember(t testing.TB, realm uuid.UUID, role tenancy.Role, rpm *int) Tenant {
	t.Helper()
	ctx := context.Background()
	email := fmt.Sprintf("%s@example.test", uuid.NewString()[:12])
	m, err := a.Tenancy.CreateUser(ctx, realm, email, "correct horse", role)
	if err != nil {
		t.Fatal(err)
	}
	tok, secret, err := a.Tenancy.CreateToken(ctx, realm, email, "test", rpm)
	if err != nil {
		t.Fatal(err)
	}
	return Tenant{RealmID: realm, UserID: m.ID, Email: email, Password: "correct horse", Role: role, TokenID: tok.ID, Token: secret}
}

// Response is an HTTP answer with its body read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test when it is not JSON.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("response %d is not JSON: %v: %s", r.Status, err, r.Body)
	}
}

// Map decodes the body as a JSON object.
func (r Response) Map(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// ErrorCode is the error code of an error response, or "".
func (r Response) ErrorCode(t testing.TB) string {
	t.Helper()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return e.Error.Code
}

// DetailFields are the fields an error response's details name, in order.
func (r Response) DetailFields(t testing.TB) []string {
	t.Helper()
	var e struct {
		Error struct {
			Details []struct {
				Field string `json:"field"`
			} `json:"details"`
		} `json:"error"`
	}
	r.JSON(t, &e)
	var out []string
	for _, d := range e.Error.Details {
		out = append(out, d.Field)
	}
	return out
}

// Do sends a request with token as bearer (none when empty) and body as JSON
// (none when nil; a []byte or string is sent as is).
func (a *App) Do(t testing.TB, method, path, token string, body any) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, a.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Response{Status: res.StatusCode, Header: res.Header, Body: b}
}
