package grid_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/test/testenv"
)

// A page read says, byte for byte, what encoding/json says of the same rows
// read plainly from the database, page after page, with the read path's
// buffers reused between pages.
func TestPageReadMatchesRowsAsStored(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb := f.table("Pages", field("Name", "text"), field("Notes", "long_text"), field("Amount", "number"))
	rows := make([]map[string]any, 450)
	for i := range rows {
		notes := "plain"
		if i%3 == 0 {
			notes = `<b>"quoted"</b> & é` + string(rune(0x2028)) + " with a longer tail to vary the size " + string(bytes.Repeat([]byte{'x'}, i))
		}
		rows[i] = map[string]any{"Name": "Item", "Notes": notes, "Amount": float64(i) / 4}
	}
	f.insert(tb, rows)
	tableID := tb.ID

	type row struct {
		ID        uuid.UUID       `json:"id"`
		Version   int64           `json:"version"`
		Cells     json.RawMessage `json:"cells"`
		CreatedAt time.Time       `json:"created_at"`
		UpdatedAt time.Time       `json:"updated_at"`
	}
	var stored []row
	db, err := testenv.Pool(t).Query(context.Background(),
		`SELECT id, version, cells, created_at, updated_at FROM rows WHERE table_id = $1 ORDER BY id`, uuid.MustParse(tableID))
	require.NoError(t, err)
	for db.Next() {
		var r row
		require.NoError(t, db.Scan(&r.ID, &r.Version, &r.Cells, &r.CreatedAt, &r.UpdatedAt))
		stored = append(stored, r)
	}
	require.NoError(t, db.Err())
	require.Len(t, stored, len(rows))

	cursor := ""
	for start := 0; start < len(stored); start += 200 {
		path := "/api/v1/tables/" + tableID + "/rows?limit=200"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		res := f.do("GET", path, nil)
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
		var body struct {
			Rows       json.RawMessage `json:"rows"`
			NextCursor *string         `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal(res.Body, &body))
		want, err := json.Marshal(stored[start:min(start+200, len(stored))])
		require.NoError(t, err)
		var got bytes.Buffer
		require.NoError(t, json.Compact(&got, body.Rows))
		require.Equal(t, string(want), got.String(), "page from row %d", start)
		if body.NextCursor == nil {
			require.Greater(t, start+200, len(stored)-1)
			break
		}
		cursor = *body.NextCursor
	}
}
