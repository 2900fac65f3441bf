package grid

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The hand-written page must say exactly what encoding/json says, byte for
// byte once encoding/json's compaction is applied to it.
func TestPageEncodingMatchesEncodingJSON(t *testing.T) {
	next := "eyJhZnRlciI6IngifQ"
	shown := `Ünïcode "quoted" <tag> & \ back`
	created := time.Date(2026, 11, 30, 2, 3, 4, 123456789, time.UTC)
	updated := time.Date(2026, 12, 1, 0, 0, 0, 0, time.FixedZone("CET", 3600))
	pages := []*page{
		{Rows: []Row{}, Links: map[string]*string{}},
		{
			Rows: []Row{
				{ID: uuid.New(), Version: 1, Cells: json.RawMessage(`{"f1": "a b", "f2": 3.5, "f3": [1, 2], "f4": {"x": null}}`), CreatedAt: created, UpdatedAt: updated},
				{ID: uuid.New(), Version: 1 << 40, Cells: json.RawMessage(`{"f1": "\u00e9\n\"\\", "f2": "<script>&amp;"}`), CreatedAt: created, UpdatedAt: created},
				{ID: uuid.New(), Version: 7, Cells: json.RawMessage(`{}`), CreatedAt: created, UpdatedAt: created},
				{ID: uuid.New(), Version: 8, Cells: json.RawMessage("{\"f1\": \"line\u2028separator\u2029é\"}"), CreatedAt: created, UpdatedAt: created},
			},
			NextCursor: &next,
			Links:      map[string]*string{uuid.NewString(): &shown, uuid.NewString(): nil},
		},
	}
	for i, p := range pages {
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.appendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(got) {
			t.Fatalf("page %d: not valid JSON: %s", i, got)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(compact.Bytes(), want) {
			t.Errorf("page %d:\n got %s\nwant %s", i, compact.Bytes(), want)
		}
		for j := range p.Rows {
			want, _ := json.Marshal(&p.Rows[j])
			compact.Reset()
			if err := json.Compact(&compact, appendRow(nil, &p.Rows[j])); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(compact.Bytes(), want) {
				t.Errorf("row %d:\n got %s\nwant %s", j, compact.Bytes(), want)
			}
		}
	}
}
