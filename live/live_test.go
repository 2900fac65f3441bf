package live

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/grid"
)

// dataOf is the data line of a frame.
func dataOf(t *testing.T, f frame) []byte {
	t.Helper()
	for _, line := range strings.Split(string(f.b), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			return []byte(d)
		}
	}
	t.Fatalf("no data in %q", f.b)
	return nil
}

func rowsOf(t *testing.T, f frame) (created, updated, deleted []uuid.UUID) {
	t.Helper()
	var d struct{ Created, Updated, Deleted []uuid.UUID }
	require.NoError(t, json.Unmarshal(dataOf(t, f), &d))
	for _, s := range [][]uuid.UUID{d.Created, d.Updated, d.Deleted} {
		slices.SortFunc(s, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	}
	return d.Created, d.Updated, d.Deleted
}

// What arrives between two messages is one message: a row made and then
// changed is made, a row deleted is only deleted, and the newest event's id
// is the message's.
func TestAStreamCoalesces(t *testing.T) {
	s := newBatch(uuid.New(), 10)
	_, ok := s.take()
	require.False(t, ok, "nothing arrived: nothing to send")

	a, b, c := uuid.New(), uuid.New(), uuid.New()
	s.add(Event{ID: "r-1", Kind: grid.EventRowCreated, Rows: []uuid.UUID{a}, At: 10})
	s.add(Event{ID: "r-2", Kind: grid.EventRowUpdated, Rows: []uuid.UUID{a, b}, At: 20})
	s.add(Event{ID: "r-3", Kind: grid.EventRowUpdated, Rows: []uuid.UUID{c}, At: 30})
	s.add(Event{ID: "r-4", Kind: grid.EventRowDeleted, Rows: []uuid.UUID{c}, At: 40})
	m, ok := s.take()
	require.True(t, ok)
	require.Equal(t, "rows", m.event)
	require.Equal(t, "r-4", m.id)
	require.True(t, strings.HasPrefix(string(m.b), "id: r-4\nevent: rows\ndata: {"), string(m.b))
	require.Equal(t, int64(10), m.oldest, "the latency counts from the oldest event waiting")
	require.Equal(t, 4, m.pending)
	created, updated, deleted := rowsOf(t, m)
	require.Equal(t, []uuid.UUID{a}, created)
	require.Equal(t, []uuid.UUID{b}, updated)
	require.Equal(t, []uuid.UUID{c}, deleted)
	_, ok = s.take()
	require.False(t, ok, "taken: empty again")
}

// More rows waiting than the bound, a change of the fields, or a bulk event
// becomes a resync, which forgets the rows: the client reloads anyway.
func TestAStreamTurnsFloodsIntoAResync(t *testing.T) {
	s := newBatch(uuid.New(), 3)
	for i := range 4 {
		s.add(Event{ID: "r-" + strconv.Itoa(i), Kind: grid.EventRowCreated, Rows: []uuid.UUID{uuid.New()}})
	}
	m, _ := s.take()
	require.Equal(t, "resync", m.event)
	require.JSONEq(t, `{"table":"`+s.table.String()+`","reason":"bulk"}`, string(dataOf(t, m)))
	require.Equal(t, "r-3", m.id)

	s.add(Event{ID: "f", Kind: grid.EventFieldsChanged})
	s.add(Event{ID: "r", Kind: grid.EventRowCreated, Rows: []uuid.UUID{uuid.New()}})
	m, _ = s.take()
	require.Equal(t, "resync", m.event)
	require.Contains(t, string(m.b), `"reason":"fields"`)

	s.add(Event{ID: "b", Kind: kindResync})
	m, _ = s.take()
	require.Equal(t, "resync", m.event)
	require.Contains(t, string(m.b), `"reason":"bulk"`)

	s.owe("gap")
	m, ok := s.take()
	require.True(t, ok)
	require.Contains(t, string(m.b), `"reason":"gap"`)
}

// A resume finds the events of its table after the id it names, oldest
// first, even once the ring has wrapped; an id no longer remembered is not
// found.
func TestResumeReplaysFromTheRing(t *testing.T) {
	h := New(nil, Config{}, nil)
	realm, table, other := uuid.New(), uuid.New(), uuid.New()
	for i := range recentEvents + 10 {
		tb := table
		if i%2 == 1 {
			tb = other
		}
		h.deliver(Event{ID: strconv.Itoa(i), Realm: realm, Table: tb, Kind: grid.EventRowUpdated})
	}
	evs, ok := h.since(realm, table, strconv.Itoa(recentEvents))
	require.True(t, ok)
	require.Len(t, evs, 4, "the events of its table after it")
	require.Equal(t, strconv.Itoa(recentEvents+2), evs[0].ID)
	require.Equal(t, strconv.Itoa(recentEvents+8), evs[3].ID)
	_, ok = h.since(realm, table, "4") // overwritten
	require.False(t, ok)
	_, ok = h.since(uuid.New(), table, strconv.Itoa(recentEvents))
	require.True(t, ok)
	evs, _ = h.since(uuid.New(), table, strconv.Itoa(recentEvents))
	require.Empty(t, evs, "another realm's events are never replayed")
}

// Caps count per replica, realm and user, and a closed stream frees its
// place; events reach only the streams of their table and realm, encoded
// once for all of them.
func TestCapsAndDelivery(t *testing.T) {
	h := New(nil, Config{MaxStreams: 3, MaxStreamsPerRealm: 2, MaxStreamsPerUser: 1}, nil)
	r1, r2, table := uuid.New(), uuid.New(), uuid.New()
	u1, u2, u3 := uuid.New(), uuid.New(), uuid.New()
	a := newStream(r1, table, u1)
	require.Empty(t, h.open(a))
	require.Equal(t, limitUser, h.open(newStream(r1, table, u1)))
	b := newStream(r1, table, u2)
	require.Empty(t, h.open(b))
	require.Equal(t, limitRealm, h.open(newStream(r1, table, u3)))
	c := newStream(r2, table, u3) // a forged table id of another realm
	require.Empty(t, h.open(c))
	require.Equal(t, limitReplica, h.open(newStream(r2, uuid.New(), uuid.New())))

	h.deliver(Event{ID: "x", Realm: r1, Table: table, Kind: grid.EventRowCreated, Rows: []uuid.UUID{uuid.New()}})
	fa, fb := <-a.out, <-b.out
	require.Equal(t, "x", fa.id)
	require.Same(t, &fa.b[0], &fb.b[0], "one encoding for every stream of the table")
	require.Empty(t, c.out, "an event reaches its realm's streams only")

	h.shut(b)
	require.Empty(t, h.open(newStream(r1, table, u2)))
	require.Equal(t, 3, h.Streams())
}

// A stream whose client falls behind is marked lagging rather than
// buffering without bound.
func TestALaggingStreamIsMarked(t *testing.T) {
	s := newStream(uuid.New(), uuid.New(), uuid.New())
	for range streamBuffer {
		s.send(frame{event: "rows"})
	}
	require.False(t, s.lagging.Load())
	s.send(frame{event: "rows"})
	require.True(t, s.lagging.Load())
	require.Len(t, s.out, streamBuffer)
}

// Writers and a reader at once (for the race detector): what is delivered
// while messages are sent is all in the messages.
func TestDeliverConcurrently(t *testing.T) {
	h := New(nil, Config{Coalesce: time.Millisecond, BulkRows: 1_000_000}, nil)
	realm, table := uuid.New(), uuid.New()
	s := newStream(realm, table, uuid.New())
	require.Empty(t, h.open(s))
	const writers, each = 4, 500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				h.deliver(Event{ID: strconv.Itoa(w*each + i), Realm: realm, Table: table, Kind: grid.EventRowCreated, Rows: []uuid.UUID{uuid.New()}})
			}
		}()
	}
	got := 0
	deadline := time.After(10 * time.Second)
	for got < writers*each {
		select {
		case f := <-s.out:
			c, _, _ := rowsOf(t, f)
			got += len(c)
		case <-deadline:
			t.Fatalf("%d of %d rows told", got, writers*each)
		}
	}
	wg.Wait()
	require.False(t, s.lagging.Load())
}

// Stream writes run at most Writers at once: a message that wakes every
// stream of a table does not put them all on the cores together. A slot
// rests twice as long as its writes ran. A write whose client takes no data
// keeps its slot only briefly, so it holds up no other stream; a write
// waiting for a slot gives up when its stream ends.
func TestStreamWritesTakeTurns(t *testing.T) {
	h := New(nil, Config{Writers: 2}, nil)
	h.hold = time.Hour
	var mu sync.Mutex
	running, most := 0, 0
	unblock := make(chan struct{})
	entered := make(chan int, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := h.write(t.Context(), func() error {
				mu.Lock()
				running++
				most = max(most, running)
				mu.Unlock()
				entered <- i
				<-unblock
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	<-entered
	<-entered
	select {
	case <-entered:
		t.Fatal("a third write ran beside two, with two slots")
	case <-time.After(50 * time.Millisecond):
	}
	unblock <- struct{}{} // one write ends: the third takes its slot
	<-entered
	close(unblock)
	wg.Wait()
	require.Equal(t, 2, most)

	// The next write on a slot waits out its rest.
	rested := New(nil, Config{Writers: 1}, nil)
	rested.hold = time.Hour
	var began, ended time.Time
	require.NoError(t, rested.write(t.Context(), func() error {
		began = time.Now()
		time.Sleep(2 * time.Millisecond)
		ended = time.Now()
		return nil
	}))
	var next time.Time
	require.NoError(t, rested.write(t.Context(), func() error { next = time.Now(); return nil }))
	require.GreaterOrEqual(t, next.Sub(ended), writeRest*ended.Sub(began), "the slot's rest")

	// A write blocked on its client keeps its slot for h.hold at most.
	blocked := New(nil, Config{Writers: 1}, nil)
	blocked.hold = 10 * time.Millisecond
	stuck := make(chan struct{})
	defer close(stuck)
	go func() { _ = blocked.write(t.Context(), func() error { <-stuck; return nil }) }()
	done := make(chan error, 1)
	go func() { done <- blocked.write(t.Context(), func() error { return nil }) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a write waited behind one blocked on its client")
	}

	// With every slot held, a write whose stream ends gives up.
	ending := New(nil, Config{Writers: 1}, nil)
	ending.hold = time.Hour
	hold := make(chan struct{})
	defer close(hold)
	go func() { _ = ending.write(t.Context(), func() error { <-hold; return nil }) }()
	for len(ending.slots) > 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, ending.write(ctx, func() error { t.Error("ran without a slot"); return nil }), context.Canceled)
}
