package live

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/fairness"
	"github.com/appdor/appdor/grid"
	"github.com/appdor/appdor/tenancy"
)

// stream is one client's subscription to one table: what it has not been
// sent yet, coalesced.
type stream struct {
	realm, table, user uuid.UUID
	wake               chan struct{} // has room for one: "something to send"

	mu                        sync.Mutex
	created, updated, deleted map[uuid.UUID]struct{}
	resyncWhy                 string // a resync is owed, for this reason
	lastID                    string // the id of the newest event taken in
	oldest                    int64  // publish time of the oldest event waiting, Unix µs
	pending                   int    // events taken in since the last message
	bulk                      int
}

func newStream(realm, table, user uuid.UUID, bulk int) *stream {
	return &stream{realm: realm, table: table, user: user, bulk: bulk, wake: make(chan struct{}, 1),
		created: map[uuid.UUID]struct{}{}, updated: map[uuid.UUID]struct{}{}, deleted: map[uuid.UUID]struct{}{}}
}

func (s *stream) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// add takes ev in: its rows join the sets waiting (a deleted row leaves the
// others), and more rows than bulk, or a change of the fields, become a
// resync.
func (s *stream) add(ev Event) {
	s.mu.Lock()
	if s.pending == 0 {
		s.oldest = ev.At
	}
	s.pending++
	s.lastID = ev.ID
	switch ev.Kind {
	case grid.EventRowCreated:
		for _, id := range ev.Rows {
			s.created[id] = struct{}{}
		}
	case grid.EventRowUpdated:
		for _, id := range ev.Rows {
			if _, made := s.created[id]; !made {
				s.updated[id] = struct{}{}
			}
		}
	case grid.EventRowDeleted:
		for _, id := range ev.Rows {
			delete(s.created, id)
			delete(s.updated, id)
			s.deleted[id] = struct{}{}
		}
	case grid.EventFieldsChanged:
		s.resyncLocked("fields")
	default:
		s.resyncLocked("bulk")
	}
	if s.resyncWhy == "" && len(s.created)+len(s.updated)+len(s.deleted) > s.bulk {
		s.resyncLocked("bulk")
	}
	s.mu.Unlock()
	s.poke()
}

// resync owes the client a resync for why; id, when set, is the event it
// stands for.
func (s *stream) resync(why, id string) {
	s.mu.Lock()
	if s.pending == 0 {
		s.oldest = time.Now().UnixMicro()
	}
	s.pending++
	if id != "" {
		s.lastID = id
	}
	s.resyncLocked(why)
	s.mu.Unlock()
	s.poke()
}

func (s *stream) resyncLocked(why string) {
	if s.resyncWhy == "" {
		s.resyncWhy = why
	}
	clear(s.created)
	clear(s.updated)
	clear(s.deleted)
}

// message is what a stream sends next, taken out of it.
type message struct {
	event   string // rows or resync
	id      string
	data    []byte
	oldest  int64
	pending int
}

// take returns the message waiting, if any, and empties the stream.
func (s *stream) take() (message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == 0 {
		return message{}, false
	}
	m := message{id: s.lastID, oldest: s.oldest, pending: s.pending}
	if s.resyncWhy != "" {
		m.event = "resync"
		m.data, _ = json.Marshal(map[string]any{"table": s.table, "reason": s.resyncWhy})
	} else {
		m.event = "rows"
		m.data, _ = json.Marshal(struct {
			Table   uuid.UUID   `json:"table"`
			Created []uuid.UUID `json:"created,omitempty"`
			Updated []uuid.UUID `json:"updated,omitempty"`
			Deleted []uuid.UUID `json:"deleted,omitempty"`
		}{s.table, keys(s.created), keys(s.updated), keys(s.deleted)})
	}
	s.resyncWhy, s.pending = "", 0
	clear(s.created)
	clear(s.updated)
	clear(s.deleted)
	return m, true
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
	set := h.streams[s.table]
	if set == nil {
		set = map[*stream]struct{}{}
		h.streams[s.table] = set
	}
	set[s] = struct{}{}
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
	if set := h.streams[s.table]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(h.streams, s.table)
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
	s := newStream(p.RealmID, table, user, h.cfg.BulkRows)
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
		h.mu.Lock()
		evs, ok := h.since(s.realm, table, id)
		h.mu.Unlock()
		if !ok {
			s.resync("resume", "")
		}
		for _, ev := range evs {
			s.add(ev)
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
		_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
		if _, err := res.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	hello, _ := json.Marshal(map[string]any{"table": table})
	if err := write(append(append([]byte("retry: 2000\nevent: hello\ndata: "), hello...), "\n\n"...)); err != nil {
		return nil
	}

	heartbeat := time.NewTicker(h.cfg.Heartbeat)
	defer heartbeat.Stop()
	idle := time.NewTimer(h.cfg.IdleTimeout)
	defer idle.Stop()
	var last time.Time
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
		case <-s.wake:
			// At most one message a Coalesce: what arrives meanwhile joins it.
			if wait := h.cfg.Coalesce - time.Since(last); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return nil
				case <-h.closed:
					return nil
				}
			}
			m, ok := s.take()
			if !ok {
				continue
			}
			buf := make([]byte, 0, len(m.data)+64)
			if m.id != "" {
				buf = append(append(append(buf, "id: "...), m.id...), '\n')
			}
			buf = append(append(append(buf, "event: "...), m.event...), '\n')
			buf = append(append(append(buf, "data: "...), m.data...), "\n\n"...)
			if err := write(buf); err != nil {
				return h.dropped(err)
			}
			last = time.Now()
			h.m.delivered.WithLabelValues(m.event).Inc()
			h.m.coalesced.Add(float64(m.pending - 1))
			h.m.latency.Observe(max(0, float64(time.Now().UnixMicro()-m.oldest)/1e6))
			idle.Reset(h.cfg.IdleTimeout)
		}
	}
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
