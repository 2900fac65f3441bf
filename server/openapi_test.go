package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/tenancy"
)

// router builds the real route table without connecting to anything: routes()
// only registers handlers, which touch their services when a request comes.
func router(t *testing.T) *echo.Echo {
	t.Helper()
	a := &App{
		cfg:     Config{BodyLimit: "1M"},
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		metrics: prometheus.NewRegistry(),
		tenancy: tenancy.New(nil),
	}
	a.routes()
	return a.echo
}

// notAPI are routes outside the APIs the document describes: /api/v1 and
// the Airtable-compatible /v0.
func notAPI(path string) bool {
	return !strings.HasPrefix(path, apiPrefix+"/") && !strings.HasPrefix(path, "/v0/") ||
		slices.Contains([]string{"/healthz", "/readyz", "/metrics"}, path)
}

const apiPrefix = "/api/v1"

var echoParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// openAPIPath turns an Echo route path into the document's form:
// /api/v1/tables/:table → /tables/{table}.
func openAPIPath(path string) string {
	return echoParam.ReplaceAllString(strings.TrimPrefix(path, apiPrefix), "{$1}")
}

type document struct {
	OpenAPI  string                `json:"openapi"`
	Security []map[string][]string `json:"security"`
	Paths    map[string]pathItem   `json:"paths"`
	Comps    struct {
		Schemas         map[string]json.RawMessage `json:"schemas"`
		SecuritySchemes map[string]json.RawMessage `json:"securitySchemes"`
	} `json:"components"`
}

// pathItem is a path's operations by method; its servers, which the /v0
// paths set (the document's server is /api/v1), are not an operation.
type pathItem map[string]operation

func (p *pathItem) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*p = pathItem{}
	for k, v := range raw {
		if k == "servers" {
			continue
		}
		var op operation
		if err := json.Unmarshal(v, &op); err != nil {
			return err
		}
		(*p)[k] = op
	}
	return nil
}

type operation struct {
	Summary   string                     `json:"summary"`
	Security  *[]map[string][]string     `json:"security"`
	Responses map[string]json.RawMessage `json:"responses"`
	Params    []struct {
		Ref  string `json:"$ref"`
		Name string `json:"name"`
		In   string `json:"in"`
	} `json:"parameters"`
}

func loadDocument(t *testing.T) document {
	t.Helper()
	var d document
	require.NoError(t, json.Unmarshal(openAPI, &d), "openapi.json is not JSON")
	return d
}

// TestOpenAPICoversRoutes fails when a route registered on the router is
// missing from the document, or the document describes a route that is not
// registered: add the operation to server/openapi.json.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	d := loadDocument(t)
	e := router(t)

	registered := map[string]bool{}
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound || notAPI(r.Path) || strings.Contains(r.Path, "*") {
			continue
		}
		key := r.Method + " " + openAPIPath(r.Path)
		registered[key] = true
		ops, ok := d.Paths[openAPIPath(r.Path)]
		if !assertf(t, ok, "%s %s is registered but its path %s is not in server/openapi.json", r.Method, r.Path, openAPIPath(r.Path)) {
			continue
		}
		_, ok = ops[strings.ToLower(r.Method)]
		assertf(t, ok, "%s %s is registered but has no operation in server/openapi.json", r.Method, r.Path)
	}
	for path, ops := range d.Paths {
		for method := range ops {
			key := strings.ToUpper(method) + " " + path
			assertf(t, registered[key], "server/openapi.json describes %s, which the router does not have", key)
		}
	}
}

func assertf(t *testing.T, ok bool, format string, args ...any) bool {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
	return ok
}

// TestOpenAPIDocument checks what every operation must say: a summary, its
// security, its path parameters, and the one error schema.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	d := loadDocument(t)
	require.Equal(t, "3.1.0", d.OpenAPI)
	require.Contains(t, d.Comps.SecuritySchemes, "bearer")
	require.Contains(t, d.Comps.SecuritySchemes, "session")
	require.ElementsMatch(t, []map[string][]string{{"bearer": {}}, {"session": {}}}, d.Security)

	var errSchema struct {
		Properties struct {
			Error struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"error"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(d.Comps.Schemas["Error"], &errSchema))
	for _, k := range []string{"code", "message", "details", "retry_after_ms"} {
		require.Contains(t, errSchema.Properties.Error.Properties, k)
	}

	public := map[string]bool{"POST /auth/login": true, "POST /auth/logout": true, "GET /openapi.json": true,
		"POST /auth/invite": true, "GET /setup": true, "POST /setup": true}
	brace := regexp.MustCompile(`\{([^}]+)\}`)
	for path, ops := range d.Paths {
		for method, op := range ops {
			key := strings.ToUpper(method) + " " + path
			require.NotEmpty(t, op.Summary, key)
			require.NotEmpty(t, op.Responses, key)
			if public[key] {
				require.NotNil(t, op.Security, "%s is public: security: []", key)
				require.Empty(t, *op.Security, key)
			} else {
				require.Nil(t, op.Security, "%s takes the document's bearer or session security", key)
				require.Contains(t, op.Responses, "401", key)
			}
			for _, m := range brace.FindAllStringSubmatch(path, -1) {
				found := false
				for _, p := range op.Params {
					found = found || p.Ref == "#/components/parameters/"+m[1] || (p.In == "path" && p.Name == m[1])
				}
				require.True(t, found, "%s does not declare its path parameter %s", key, m[1])
			}
		}
	}
}

// TestOpenAPIServed: the document is served, public, as JSON.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := router(t)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, apiPrefix+"/openapi.json", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Header().Get("Content-Type"), "application/json")
	require.JSONEq(t, string(openAPI), rec.Body.String())
}
