// Package web is the browser grid: its TypeScript sources live beside this
// file and are built by Vite into dist/, which is committed so that a fresh
// clone builds and serves the real UI without Node. This package embeds dist/
// and serves it: hashed assets with long-lived cache headers, every other
// path falling back to index.html so the UI's own router can take deep links
// such as /t/{table}. It must never serve anything but the built files: the UI
// reaches data only through the public API.
package web

import (
	"bytes"
	"compress/gzip"
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

//go:embed all:dist
var dist embed.FS

// ContentSecurityPolicy is sent with every UI response. Scripts and styles
// come only from this origin; inline style attributes are allowed because the
// grid positions its overlay editors with them. The API is same-origin, so
// connect-src is 'self' too.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; object-src 'none'; " +
	"base-uri 'self'; form-action 'self'; frame-ancestors 'none'"

// immutable is the cache policy of files whose names carry a content hash.
const immutable = "public, max-age=31536000, immutable"

type file struct {
	body, gz    []byte
	contentType string
	etag        string
	hashed      bool
}

// Handler serves the embedded UI. It reads and compresses the files once.
func Handler() http.Handler {
	files := map[string]*file{}
	err := fs.WalkDir(dist, "dist", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := dist.ReadFile(p)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, "dist")
		f := &file{body: b, hashed: strings.HasPrefix(name, "/assets/")}
		f.contentType = mime.TypeByExtension(path.Ext(name))
		if f.contentType == "" {
			f.contentType = "application/octet-stream"
		}
		f.etag = `"` + strconv.FormatUint(fnv64(b), 36) + `"`
		if compressible(name) && len(b) > 1024 {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			_, _ = zw.Write(b)
			_ = zw.Close()
			if buf.Len() < len(b) {
				f.gz = buf.Bytes()
			}
		}
		files[name] = f
		return nil
	})
	if err != nil {
		// The embedded tree is fixed at build time; failing to read it is a
		// broken binary, not a runtime condition.
		panic("web: reading embedded dist: " + err.Error())
	}
	index := files["/index.html"]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		f, ok := files[path.Clean("/"+r.URL.Path)]
		switch {
		case ok && f != index:
		case strings.HasPrefix(r.URL.Path, "/assets/") || path.Ext(r.URL.Path) != "":
			// A missing asset is a 404, never index.html: a stale page
			// asking for an old bundle must fail visibly, not parse HTML
			// as JavaScript.
			http.NotFound(w, r)
			return
		default:
			f = index
		}
		if f == nil {
			http.Error(w, "the UI was not built into this binary", http.StatusNotFound)
			return
		}
		serve(w, r, f)
	})
}

func serve(w http.ResponseWriter, r *http.Request, f *file) {
	h := w.Header()
	h.Set("Content-Type", f.contentType)
	h.Set("ETag", f.etag)
	if f.hashed {
		h.Set("Cache-Control", immutable)
	} else {
		// index.html names the current bundle: always revalidate it.
		h.Set("Cache-Control", "no-cache")
	}
	body := f.body
	if f.gz != nil {
		h.Add("Vary", "Accept-Encoding")
		if acceptsGzip(r) {
			h.Set("Content-Encoding", "gzip")
			body = f.gz
		}
	}
	if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.TrimSpace(q) != "q=0" {
			return true
		}
	}
	return false
}

func compressible(name string) bool {
	switch path.Ext(name) {
	case ".js", ".css", ".html", ".svg", ".json", ".txt", ".map":
		return true
	}
	return false
}

func fnv64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
