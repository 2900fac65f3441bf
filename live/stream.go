package live

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/fairness"
	"github.com/appdor/appdor/grid"
	"github.com/appdor/appdor/tenancy"
)

// batch is what a table's watchers have not been sent yet, coalesced.
type batch struct {
	table                     uuid.UUID
	bulk                      int
	created, updated, deleted map[uuid.UUID]struct{}
	resyncWhy                 string // a resync is owed, for this reason
	lastID                    string // the id of the newest event taken in
	oldest                    int64  // publish time of the oldest event waiting, Unix µs
	pending                   int    // events taken in since the last message
}

func newBatch(table uuid.UUID, bulk int) *batch {
	return &batch{table: table, bulk: bulk,
		created: map[uuid.UUID]struct{}{}, updated: map[uuid.UUID]struct{}{}, deleted: map[uuid.UUID]struct{}{}}
}

// add takes ev in: its rows join the sets waiting (a deleted row leaves the
// others), and more rows than bulk, or a change of the fields, become a
// resync.
func (b *batch) add(ev Event) {
	if b.pending == 0 {
		b.oldest = ev.At
	}
	b.pending++
	b.lastID = ev.ID
	switch ev.Kind {
	case grid.EventRowCreated:
		for _, id := range ev.Rows {
			b.created[id] = struct{}{}
		}
	case grid.EventRowUpdated:
		for _, id := range ev.Rows {
			if _, made := b.created[id]; !made {
				b.updated[id] = struct{}{}
			}
		}
	case grid.EventRowDeleted:
		for _, id := range ev.Rows {
			delete(b.created, id)
			delete(b.updated, id)
			b.deleted[id] = struct{}{}
		}
	case grid.EventFieldsChanged:
		b.resync("fields")
	default:
		b.resync("bulk")
	}
	if b.resyncWhy == "" && len(b.created)+len(b.updated)+len(b.deleted) > b.bulk {
		b.resync("bulk")
	}
}

// owe takes in a resync for why that no event carried (a lost
// subscription, a resume from too far back).
func (b *batch) owe(why string) {
	if b.pending == 0 {
		b.oldest = time.Now().UnixMicro()
	}
	b.pending++
	b.resync(why)
}

// resync owes a resync for why, and forgets the rows: the client reloads
// anyway.
func (b *batch) resync(why string) {
	if b.resyncWhy == "" {
		b.resyncWhy = why
	}
	clear(b.created)
	clear(b.updated)
	clear(b.deleted)
}

// frame is one message, encoded once for every stream it goes to.
type frame struct {
	event   string // rows or resync
	id      string
	b       []byte // the whole server-sent event
	oldest  int64
	pending int
}

// take returns the message waiting, if any, and empties the batch.
func (b *batch) take() (frame, bool) {
	if b.pending == 0 {
		return frame{}, false
	}
	f := frame{id: b.lastID, oldest: b.oldest, pending: b.pending}
	var data []byte
	if b.resyncWhy != "" {
		f.event = "resync"
		data, _ = json.Marshal(map[string]any{"table": b.table, "reason": b.resyncWhy})
	} else {
		f.event = "rows"
		data, _ = json.Marshal(struct {
			Table   uuid.UUID   `json:"table"`
			Created []uuid.UUID `json:"created,omitempty"`
			Updated []uuid.UUID `json:"updated,omitempty"`
			Deleted []uuid.UUID `json:"deleted,omitempty"`
		}{b.table, keys(b.created), keys(b.updated), keys(b.deleted)})
	}
	f.b = encodeFrame(f.id, f.event, data)
	b.resyncWhy, b.pending = "", 0
	clear(b.created)
	clear(b.updated)
	clear(b.deleted)
	return f, true
}

func encodeFrame(id, event string, data []byte) []byte {
	buf := make([]byte, 0, len(data)+len(id)+len(event)+24)
	if id != "" {
		buf = append(append(append(buf, "id: "...), id...), '\n')
	}
	buf = append(append(append(buf, "event: "...), event...), '\n')
	return append(append(append(buf, "data: "...), data...), "\n\n"...)
}

func keys(m map[uuid.UUID]struct{}) []uuid.UUID {
	if len(m) == 0 {
		return nil
	}
	out := make([]uuid.UUID, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	return out
}

// topic is one table's watchers on this replica, and what they have not
// been sent yet: a table's events are coalesced once, encoded once, and
// the same bytes go to each of its streams.
type topic struct {
	key     topicKey
	streams map[*stream]struct{}
	batch   *batch
	last    time.Time   // when it last sent
	timer   *time.Timer // a send is due; nil when none is
}

type topicKey struct{ realm, table uuid.UUID }

// streamBuffer is how many messages a stream may have waiting for its
// client; past it the client is behind, and gets a resync instead.
const streamBuffer = 16

// stream is one client's subscription to one table.
type stream struct {
	realm, table, user uuid.UUID
	out                chan frame
	lagging            atomic.Bool // a message did not fit in out: the next one is a resync
}

func newStream(realm, table, user uuid.UUID) *stream {
	return &stream{realm: realm, table: table, user: user, out: make(chan frame, streamBuffer)}
}

// send hands f to the stream without waiting; a stream with no room left
// is marked lagging.
func (s *stream) send(f frame) {
	select {
	case s.out <- f:
	default:
		s.lagging.Store(true)
	}
}

// schedule sends t's batch now if the last send was Coalesce ago, or once
// it is. h.mu is held.
func (h *Hub) schedule(t *topic) {
	if t.timer != nil {
		return
	}
	wait := h.cfg.Coalesce - time.Since(t.last)
	if wait <= 0 {
		h.flush(t)
		return
	}
	t.timer = time.AfterFunc(wait, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		t.timer = nil
		h.flush(t)
	})
}

// flush sends t's batch to each of its streams. h.mu is held.
func (h *Hub) flush(t *topic) {
	f, ok := t.batch.take()
	if !ok {
		return
	}
	t.last = time.Now()
	h.m.coalesced.Add(float64(f.pending - 1))
	for s := range t.streams {
		s.send(f)
	}
}

// Refusal reasons of live_streams.
const (
	limitReplica = "live-streams"
	limitRealm   = "live-streams-per-realm"
	limitUser    = "live-streams-per-user"
)

// open registers s, or returns the flag of the cap it would pass.
func (h *Hub) open(s *stream) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.total >= h.cfg.MaxStreams:
		return limitReplica
	case h.byRealm[s.realm] >= h.cfg.MaxStreamsPerRealm:
		return limitRealm
	case h.byUser[s.user] >= h.cfg.MaxStreamsPerUser:
		return limitUser
	}
	h.total++
	h.byRealm[s.realm]++
	h.byUser[s.user]++
	k := topicKey{s.realm, s.table}
	t := h.topics[k]
	if t == nil {
		t = &topic{key: k, streams: map[*stream]struct{}{}, batch: newBatch(s.table, h.cfg.BulkRows)}
		h.topics[k] = t
	}
	t.streams[s] = struct{}{}
	h.m.open(s.realm).Inc()
	return ""
}

func (h *Hub) shut(s *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total--
	if h.byRealm[s.realm]--; h.byRealm[s.realm] == 0 {
		delete(h.byRealm, s.realm)
		h.m.forget(s.realm)
	} else {
		h.m.open(s.realm).Dec()
	}
	if h.byUser[s.user]--; h.byUser[s.user] == 0 {
		delete(h.byUser, s.user)
	}
	if t := h.topics[topicKey{s.realm, s.table}]; t != nil {
		delete(t.streams, s)
		if len(t.streams) == 0 {
			if t.timer != nil {
				t.timer.Stop()
			}
			delete(h.topics, t.key)
		}
	}
}

// Streams is how many streams this replica has open.
func (h *Hub) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// Routes registers GET /tables/:table/events on g; check returns an error
// (not_found) unless the request's realm has the table.
func (h *Hub) Routes(g *echo.Group, check func(echo.Context, uuid.UUID) error) {
	g.GET("/tables/:table/events", func(c echo.Context) error { return h.serve(c, check) })
}

const refusalMessage = "this realm (or this user) has as many live streams open as it may; close one, or retry after Retry-After"

// serve is one stream's life: checked once, then written to until the
// client goes, the stream idles, a write blocks, or the hub closes.
func (h *Hub) serve(c echo.Context, check func(echo.Context, uuid.UUID) error) error {
	table, err := grid.IDParam(c, "table")
	if err != nil {
		return err
	}
	p := tenancy.PrincipalOf(c)
	if p == nil {
		return appdor.Errorf(appdor.EUnauthorized, "sign in first")
	}
	if err := check(c, table); err != nil {
		return err
	}
	user := p.UserID
	if p.TokenID != uuid.Nil {
		user = p.TokenID // a script's token is its own client
	}
	s := newStream(p.RealmID, table, user)
	select {
	case <-h.closed:
		return &appdor.Error{Code: appdor.EUnavailable, Message: "this server is shutting down; reconnect", RetryAfter: time.Second}
	default:
	}
	if limit := h.open(s); limit != "" {
		h.m.refused.WithLabelValues(limit).Inc()
		h.cfg.Log.Warn("live_streams: a stream was refused at its cap", slog.String("realm", p.RealmID.String()),
			slog.String("table", table.String()), slog.String("flag", limit))
		return &appdor.Error{Code: appdor.EConcurrencyLimited, Message: refusalMessage, RetryAfter: 5 * time.Second,
			Details: map[string]string{"reason": "live_streams", "limit": limit}}
	}
	defer h.shut(s)
	// The check is done: the stream holds no seat while it waits.
	ctx := c.Request().Context()
	fairness.Yield(ctx)

	if id := c.Request().Header.Get("Last-Event-ID"); id != "" {
		// What it missed, as one message of its own. Events arriving
		// meanwhile reach it through its topic too; a row told twice is
		// fetched twice, never missed.
		h.mu.Lock()
		evs, ok := h.since(s.realm, table, id)
		h.mu.Unlock()
		b := newBatch(table, h.cfg.BulkRows)
		if !ok {
			b.owe("resume")
		}
		for _, ev := range evs {
			b.add(ev)
		}
		if f, ok := b.take(); ok {
			s.send(f)
		}
	}

	res := c.Response()
	rc := http.NewResponseController(res.Writer)
	_ = rc.SetReadDeadline(time.Time{}) // nothing more to read; a read deadline would cancel the request
	hdr := res.Header()
	hdr.Set(echo.HeaderContentType, "text/event-stream")
	hdr.Set(echo.HeaderCacheControl, "no-cache")
	hdr.Set("X-Accel-Buffering", "no") // a proxy in front must not buffer it
	res.WriteHeader(http.StatusOK)
	write := func(b []byte) error {
		return h.write(ctx, func() error {
			_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
			if _, err := res.Write(b); err != nil {
				return err
			}
			return rc.Flush()
		})
	}
	hello, _ := json.Marshal(map[string]any{"table": table})
	if err := write(append(append([]byte("retry: 2000\nevent: hello\ndata: "), hello...), "\n\n"...)); err != nil {
		return nil
	}

	heartbeat := time.NewTicker(h.cfg.Heartbeat)
	defer heartbeat.Stop()
	idle := time.NewTimer(h.cfg.IdleTimeout)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.closed:
			return nil
		case <-idle.C:
			h.m.ended.WithLabelValues("idle").Inc()
			return nil
		case <-heartbeat.C:
			if err := write([]byte(": ping\n\n")); err != nil {
				return h.dropped(err)
			}
		case f := <-s.out:
			if s.lagging.Swap(false) {
				// Messages were dropped: what is left is partial. A resync
				// instead, which stands for all of them.
				for len(s.out) > 0 {
					f = <-s.out
				}
				h.m.lagged.Inc()
				data, _ := json.Marshal(map[string]any{"table": table, "reason": "lag"})
				f = frame{event: "resync", id: f.id, b: encodeFrame(f.id, "resync", data), oldest: f.oldest}
			}
			if err := write(f.b); err != nil {
				return h.dropped(err)
			}
			if f.event == "rows" {
				h.m.deliveredRows.Inc()
			} else {
				h.m.delivered.WithLabelValues(f.event).Inc()
			}
			h.m.latency.Observe(max(0, float64(time.Now().UnixMicro()-f.oldest)/1e6))
			idle.Reset(h.cfg.IdleTimeout)
		}
	}
}

// slotHold is the longest a stream write keeps its slot: a client whose
// socket is full goes on writing without it, and holds up no other stream.
const slotHold = 5 * time.Millisecond

// writeRest is how many times as long as its writes ran a slot rests, once
// a millisecond of rest is owed. A message of a table wakes every stream of
// it at once (500 for a realm at its cap, ten times a second in the
// harness's live arm); written back to back they took the cores in bursts,
// and a reader of another realm measured x3.4-4.7 its baseline p99, one
// slot or 1,000. Resting twice as long as they ran (a third of a core for
// stream writes at most, per slot), x2.2 and x2.3; four times, x2.4. The
// 500 streams get their message over about 45 ms instead of 15.
const writeRest = 2

// writeSlot is one of Writers turns to write to a stream, with the rest it
// owes.
type writeSlot struct{ owed time.Duration }

// write runs w, a write to one stream, in one of Writers slots, and rests
// the slot writeRest times as long as w ran. The wait for a slot ends with
// ctx.
func (h *Hub) write(ctx context.Context, w func() error) error {
	var s *writeSlot
	select {
	case s = <-h.slots:
	case <-ctx.Done():
		return ctx.Err()
	}
	release := sync.OnceFunc(func() { h.slots <- s })
	held := time.AfterFunc(h.hold, release)
	start := time.Now()
	err := w()
	if held.Stop() { // written within slotHold: the slot is still this write's
		s.owed += time.Duration(writeRest * float64(time.Since(start)))
		if s.owed >= time.Millisecond {
			time.Sleep(s.owed)
			s.owed = 0
		}
	}
	release()
	return err
}

// dropped counts a stream cut because a write to it failed or blocked for
// WriteTimeout: its client reconnects and resumes, or resyncs.
func (h *Hub) dropped(err error) error {
	reason := "closed"
	if errors.Is(err, http.ErrHandlerTimeout) || isTimeout(err) {
		reason = "slow"
	}
	h.m.ended.WithLabelValues(reason).Inc()
	return nil
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
