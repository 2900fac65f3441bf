package grid

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
)

// Rows are written by hand rather than by encoding/json: a row's cells are a
// json.RawMessage, and encoding/json validates and compacts every raw
// message byte by byte, which was nearly half the server's CPU on a page of
// 200 rows. Cells come from a jsonb column, so PostgreSQL has already
// checked them; they are copied as they are, with the HTML-sensitive
// characters escaped as encoding/json escapes them.

// appendRow appends r as JSON, the same object encoding/json writes for a
// Row (keys in the same order, times in RFC 3339 with nanoseconds).
func appendRow(b []byte, r *Row) []byte {
	b = append(b, `{"id":`...)
	b = appendUUID(b, r.ID)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, r.Version, 10)
	b = append(b, `,"cells":`...)
	if len(r.Cells) == 0 {
		b = append(b, "null"...)
	} else {
		b = appendRaw(b, r.Cells)
	}
	b = append(b, `,"created_at":`...)
	b = appendTime(b, r.CreatedAt)
	b = append(b, `,"updated_at":`...)
	b = appendTime(b, r.UpdatedAt)
	return append(b, '}')
}

// appendRaw appends valid JSON as it is, except that <, >, &, U+2028 and
// U+2029 are escaped inside strings, as encoding/json does by default.
func appendRaw(b, raw []byte) []byte {
	for _, c := range []byte{'<', '>', '&', 0xE2} { // 0xE2 begins U+2028 and U+2029
		if bytes.IndexByte(raw, c) >= 0 {
			var buf bytes.Buffer
			buf.Grow(len(raw) + 16)
			json.HTMLEscape(&buf, raw)
			return append(b, buf.Bytes()...)
		}
	}
	return append(b, raw...)
}

// appendUUID appends id quoted, in its canonical text form, as
// uuid.UUID.String does but without a string of its own.
func appendUUID(b []byte, id uuid.UUID) []byte {
	const digits = "0123456789abcdef"
	b = append(b, '"')
	for i, x := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, digits[x>>4], digits[x&0xf])
	}
	return append(b, '"')
}

// appendTime appends t quoted as encoding/json writes it (RFC 3339 with
// nanoseconds, trailing zeros dropped, in t's own offset). It formats by
// hand: time.AppendFormat was 5% of a page read's CPU, two times a row.
// Years encoding/json refuses, offsets in seconds and offsets of a day or
// more go the long way.
func appendTime(b []byte, t time.Time) []byte {
	_, off := t.Zone()
	year, month, day := t.Date()
	if year < 0 || year > 9999 || off%60 != 0 || off <= -24*3600 || off >= 24*3600 {
		b = append(b, '"')
		b = t.AppendFormat(b, time.RFC3339Nano)
		return append(b, '"')
	}
	hour, minute, sec := t.Clock()
	b = append(b, '"')
	b = append2(append2(b, year/100), year%100)
	b = append2(append(b, '-'), int(month))
	b = append2(append(b, '-'), day)
	b = append2(append(b, 'T'), hour)
	b = append2(append(b, ':'), minute)
	b = append2(append(b, ':'), sec)
	if ns := t.Nanosecond(); ns != 0 {
		var frac [9]byte
		for i := len(frac) - 1; i >= 0; i-- {
			frac[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := len(frac)
		for frac[n-1] == '0' {
			n--
		}
		b = append(append(b, '.'), frac[:n]...)
	}
	if off == 0 {
		b = append(b, 'Z')
	} else {
		sign := byte('+')
		if off < 0 {
			sign, off = '-', -off
		}
		b = append2(append(b, sign), off/3600)
		b = append2(append(b, ':'), off/60%60)
	}
	return append(b, '"')
}

// append2 appends n (0 to 99) as two digits.
func append2(b []byte, n int) []byte {
	return append(b, byte('0'+n/10), byte('0'+n%10))
}

// appendJSON appends the page as JSON: {"rows":[…],"next_cursor":…,"links":{…}}.
func (p *page) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"rows":[`...)
	for i := range p.Rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRow(b, &p.Rows[i])
	}
	b = append(b, `],"next_cursor":`...)
	rest, err := json.Marshal(p.NextCursor)
	if err != nil {
		return nil, err
	}
	b = append(b, rest...)
	b = append(b, `,"links":`...)
	if rest, err = json.Marshal(p.Links); err != nil {
		return nil, err
	}
	b = append(b, rest...)
	return append(b, "}\n"...), nil
}

// rowOverhead is about what a row takes beside its cells: the keys, the id,
// the version and two times.
const rowOverhead = 190

// sizeHint is a guess at the page's encoded size, so its buffer grows at
// most once.
func (p *page) sizeHint() int {
	n := 64
	for i := range p.Rows {
		n += len(p.Rows[i].Cells) + rowOverhead
	}
	return n
}

// pageBuffers keeps page encoding buffers between reads: a page of 200 rows
// is over 100 KB, and a fresh buffer each read was a quarter of the read
// path's allocated bytes, which a storm turns into garbage collection that
// every realm's requests wait on. Buffers above maxPooledBuffer are left to
// the collector, so that one huge page does not stay in the pool.
var pageBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBuffer = 1 << 20

// writePage answers with the page.
func writePage(c echo.Context, p *page) error {
	bp := pageBuffers.Get().(*[]byte)
	b := slices.Grow((*bp)[:0], p.sizeHint())
	b, err := p.appendJSON(b)
	if err != nil {
		return err
	}
	// With its length known, the page goes out in one write, not in chunks
	// with a header and a trailer of their own.
	c.Response().Header().Set(echo.HeaderContentLength, strconv.Itoa(len(b)))
	// The response writer copies what it is given before Write returns, so
	// the buffer is free again once JSONBlob is done.
	err = c.JSONBlob(http.StatusOK, b)
	if cap(b) <= maxPooledBuffer {
		*bp = b[:0]
		pageBuffers.Put(bp)
	}
	return err
}

// writeRow answers with one row.
func writeRow(c echo.Context, r *Row) error {
	b := appendRow(make([]byte, 0, len(r.Cells)+rowOverhead), r)
	return c.JSONBlob(http.StatusOK, append(b, '\n'))
}
