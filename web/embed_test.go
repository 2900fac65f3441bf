package web

import (
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func get(t *testing.T, h http.Handler, path string, hdr ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func anAsset(t *testing.T, ext string) string {
	t.Helper()
	entries, err := fs.ReadDir(dist, "dist/assets")
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ext) {
			return "/assets/" + e.Name()
		}
	}
	t.Fatalf("no %s asset in dist", ext)
	return ""
}

func TestIndexAndFallback(t *testing.T) {
	t.Parallel()
	h := Handler()
	for _, p := range []string{"/", "/t/0190c3b2-0000-7000-8000-000000000000", "/login"} {
		res := get(t, h, p)
		require.Equal(t, http.StatusOK, res.StatusCode, p)
		require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"), p)
		require.Equal(t, "no-cache", res.Header.Get("Cache-Control"), p)
		require.Contains(t, res.Header.Get("Content-Security-Policy"), "script-src 'self'", p)
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
		body, _ := io.ReadAll(res.Body)
		require.Contains(t, string(body), `<div id="root">`, p)
	}
}

func TestHashedAssetsAreImmutable(t *testing.T) {
	t.Parallel()
	h := Handler()
	js := anAsset(t, ".js")
	res := get(t, h, js)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, immutable, res.Header.Get("Cache-Control"))
	require.Contains(t, res.Header.Get("Content-Type"), "javascript")

	gz := get(t, h, js, "Accept-Encoding", "gzip, br")
	require.Equal(t, "gzip", gz.Header.Get("Content-Encoding"))
	zr, err := gzip.NewReader(gz.Body)
	require.NoError(t, err)
	unzipped, err := io.ReadAll(zr)
	require.NoError(t, err)
	plain, _ := io.ReadAll(get(t, h, js).Body)
	require.Equal(t, plain, unzipped)

	again := get(t, h, js, "If-None-Match", res.Header.Get("ETag"))
	require.Equal(t, http.StatusNotModified, again.StatusCode)
}

func TestMissingAssetIsNotIndex(t *testing.T) {
	t.Parallel()
	h := Handler()
	for _, p := range []string{"/assets/index-gone.js", "/favicon.ico", "/robots.txt"} {
		res := get(t, h, p)
		require.Equal(t, http.StatusNotFound, res.StatusCode, p)
	}
}

func TestOnlyReads(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}
