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

func TestAppendUUIDMatchesString(t *testing.T) {
	for _, id := range []uuid.UUID{uuid.Nil, uuid.Max, uuid.New(), uuid.New()} {
		if got, want := string(appendUUID(nil, id)), `"`+id.String()+`"`; got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}

// Cells scanned into an arena stay as they were while later rows fill it and
// new buffers start, and a reused arena hands out fresh slices.
func TestCellArenaKeepsEachRow(t *testing.T) {
	var a cellArena
	for round := range 3 {
		a.buf = a.buf[:0]
		a.left = 50
		var want, got [][]byte
		driver := make([]byte, 0, 64<<10) // the driver's buffer, reused each row
		for i := range 60 {               // more rows than expected, of growing sizes
			driver = driver[:0]
			for range i * i * (round + 1) {
				driver = append(driver, byte('a'+i%26))
			}
			if i%7 == 3 {
				driver = nil // a NULL
			}
			if err := a.ScanBytes(driver); err != nil {
				t.Fatal(err)
			}
			want, got = append(want, bytes.Clone(driver)), append(got, a.last)
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) || (want[i] == nil) != (got[i] == nil) {
				t.Fatalf("round %d, row %d: got %q, want %q", round, i, got[i], want[i])
			}
			if cap(got[i]) != len(got[i]) {
				t.Fatalf("round %d, row %d: room to append into the next row", round, i)
			}
		}
	}
}

// The hand-formatted time says what encoding/json says, for every offset,
// precision and year it may meet.
func TestTimeEncodingMatchesEncodingJSON(t *testing.T) {
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("IST", 5*3600+1800), time.FixedZone("BRT", -3*3600),
		time.FixedZone("odd", -(9*3600 + 30*60 + 15)), time.FixedZone("far", 26*3600)}
	if ny, err := time.LoadLocation("America/New_York"); err == nil {
		zones = append(zones, ny)
	}
	times := []time.Time{
		time.Date(2026, 11, 30, 2, 3, 4, 123456789, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 3, 8, 7, 0, 0, 100000000, time.UTC), time.Date(1970, 1, 1, 0, 0, 0, 120000, time.UTC),
	}
	for i := range 200 {
		times = append(times, time.Unix(int64(i)*7919*86400/3+int64(i*i), int64(i)*4999999))
	}
	for _, z := range zones {
		for _, at := range times {
			at = at.In(z)
			want, err := json.Marshal(at)
			if err != nil {
				continue // a time encoding/json refuses is never a row's
			}
			if got := appendTime(nil, at); !bytes.Equal(got, want) {
				t.Errorf("%v in %v: got %s, want %s", at, z, got, want)
			}
		}
	}
}
