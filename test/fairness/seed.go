package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// tenant is a seeded realm: a member's token and a table of rows.
type tenant struct {
	Name    string
	RealmID string
	Email   string
	Token   string
	TableID string
	Fields  map[string]string // field name → id
	RowIDs  []string
}

var seedFields = []map[string]any{
	{"name": "Name", "type": "text"},
	{"name": "Notes", "type": "long_text"},
	{"name": "Amount", "type": "number", "options": map[string]any{"precision": 2}},
	{"name": "Done", "type": "checkbox"},
	{"name": "Due", "type": "date"},
	{"name": "Status", "type": "single_select", "options": map[string]any{"choices": []string{"new", "open", "won", "lost"}}},
	{"name": "Email", "type": "email"},
	{"name": "Site", "type": "url"},
}

var words = []string{"alpha", "bravo", "cedar", "delta", "ember", "fjord", "grove", "harbor", "island", "juniper", "kestrel", "lumen"}

// apiCall sends one API request for seeding, as a well-behaved client does:
// a 429 (a new token from this address beyond the server's ceiling on unknown
// credentials, say) is retried after its Retry-After, a few times.
func apiCall(ctx context.Context, method, url, token string, body any) (int, []byte, error) {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		payload = b
	}
	for attempt := 0; ; attempt++ {
		var rd io.Reader
		if payload != nil {
			rd = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusTooManyRequests || attempt == 10 || err != nil {
			return res.StatusCode, b, err
		}
		wait, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		select {
		case <-time.After(time.Duration(max(wait, 1)) * time.Second):
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	}
}

// seedTenant makes a realm, an owner and a token through the CLI, then a
// table of 8 fields and rows through the API. A realmRPM > 0 replaces the
// server's default realm ceiling for this realm; it is set before the realm's
// first request, so no cached token answer holds the old one.
func (s *stack) seedTenant(ctx context.Context, base, name string, rows, realmRPM int) (*tenant, error) {
	r, err := s.cli(ctx, "realm", "create", name)
	if err != nil {
		return nil, err
	}
	t := &tenant{Name: name, RealmID: r["id"].(string), Email: fmt.Sprintf("owner@%s.test", name), Fields: map[string]string{}}
	if realmRPM > 0 {
		if err := s.setRealmCeiling(ctx, t.RealmID, realmRPM); err != nil {
			return nil, err
		}
	}
	if _, err := s.cli(ctx, "user", "create", "--realm", t.RealmID, "--email", t.Email, "--password", "storm-harness", "--role", "owner"); err != nil {
		return nil, err
	}
	if t.Token, err = s.token(ctx, t, "editor", 0); err != nil {
		return nil, err
	}
	code, body, err := apiCall(ctx, "POST", base+"/api/v1/apps", t.Token, map[string]any{"name": "Sales"})
	if err != nil || code != 201 {
		return nil, fmt.Errorf("create app: %d %s %v", code, body, err)
	}
	var app struct{ ID string }
	_ = json.Unmarshal(body, &app)
	code, body, err = apiCall(ctx, "POST", base+"/api/v1/apps/"+app.ID+"/tables", t.Token,
		map[string]any{"name": "Deals", "fields": seedFields})
	if err != nil || code != 201 {
		return nil, fmt.Errorf("create table: %d %s %v", code, body, err)
	}
	var tbl struct {
		ID     string
		Fields []struct{ ID, Name string }
	}
	_ = json.Unmarshal(body, &tbl)
	t.TableID = tbl.ID
	for _, f := range tbl.Fields {
		t.Fields[f.Name] = f.ID
	}
	rng := rand.New(rand.NewPCG(uint64(len(name)), 7))
	for done := 0; done < rows; {
		n := min(1000, rows-done)
		batch := make([]map[string]any, n)
		for i := range batch {
			k := done + i
			w := words[rng.IntN(len(words))]
			batch[i] = map[string]any{"cells": map[string]any{
				t.Fields["Name"]:   fmt.Sprintf("%s deal %d", w, k),
				t.Fields["Notes"]:  fmt.Sprintf("Call %s about the %s renewal; follow up next week.", w, words[k%len(words)]),
				t.Fields["Amount"]: float64(rng.IntN(1_000_000)) / 100,
				t.Fields["Done"]:   k%3 == 0,
				t.Fields["Due"]:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, k%365).Format(time.DateOnly),
				t.Fields["Status"]: []string{"new", "open", "won", "lost"}[k%4],
				t.Fields["Email"]:  fmt.Sprintf("contact%d@%s.example", k, w),
				t.Fields["Site"]:   fmt.Sprintf("https://%s.example/%d", w, k),
			}}
		}
		code, body, err := apiCall(ctx, "POST", base+"/api/v1/tables/"+t.TableID+"/rows", t.Token, map[string]any{"rows": batch})
		if err != nil || code != 201 {
			return nil, fmt.Errorf("seed rows: %d %.300s %v", code, body, err)
		}
		var out struct{ Rows []struct{ ID string } }
		_ = json.Unmarshal(body, &out)
		for _, r := range out.Rows {
			t.RowIDs = append(t.RowIDs, r.ID)
		}
		done += n
	}
	return t, nil
}

// token makes another token for the tenant's owner, with a ceiling when
// rpm > 0.
func (s *stack) token(ctx context.Context, t *tenant, name string, rpm int) (string, error) {
	args := []string{"token", "create", "--realm", t.RealmID, "--user", t.Email, "--name", name}
	if rpm > 0 {
		args = append(args, "--requests-per-minute", fmt.Sprint(rpm))
	}
	tok, err := s.cli(ctx, args...)
	if err != nil {
		return "", err
	}
	return tok["token"].(string), nil
}

// setRealmCeiling sets a realm's own requests-per-minute ceiling in the
// database (the CLI has no command for it).
func (s *stack) setRealmCeiling(ctx context.Context, realmID string, rpm int) error {
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, "UPDATE realms SET requests_per_minute = $1 WHERE id = $2", rpm, realmID)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("realm %s not found", realmID)
	}
	if err != nil {
		return fmt.Errorf("setting the realm's ceiling: %w", err)
	}
	return nil
}
