package automations

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"code.dny.dev/ssrf"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/appdor/appdor"
)

// SecretPrefix starts every webhook signing secret (Standard Webhooks).
const SecretPrefix = "whsec_"

// maxRetryAfter bounds how long a receiver's Retry-After may put a delivery off.
const maxRetryAfter = 24 * time.Hour

// newSecret returns a signing secret: whsec_ and the base64 of 32 random bytes.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// deliveryID returns the webhook-id of the delivery of an event by an
// automation's webhook action: the same for the same three, so an
// evaluation made again (its first one lost with a crash, see
// WorkerConnection) sends its webhooks under the ids they had.
func deliveryID(event int64, automation uuid.UUID, action string) string {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(event))
	h.Write(b[:])
	h.Write(automation[:])
	h.Write([]byte(action))
	return "msg_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// sender makes webhook requests: signed, bounded in time, never following a
// redirect, and dialling only addresses the SSRF guard allows. The guard
// checks the address actually dialled, after DNS, so a name that resolves (or
// re-resolves) to a private address is refused too.
type sender struct {
	client   *http.Client
	schedule []time.Duration
}

func newSender(cfg Config) *sender {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if !cfg.AllowPrivate {
		var v4, v6 []netip.Prefix
		for _, p := range cfg.AllowCIDRs {
			if p.Addr().Is4() {
				v4 = append(v4, p)
			} else {
				v6 = append(v6, p)
			}
		}
		dialer.Control = ssrf.New(ssrf.WithAnyPort(), ssrf.WithAllowedV4Prefixes(v4...), ssrf.WithAllowedV6Prefixes(v6...)).Safe
	}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would be dialled instead of the receiver, past the guard
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: cfg.DeliveryTimeout,
	}
	return &sender{
		client: &http.Client{
			Transport: tr,
			Timeout:   cfg.DeliveryTimeout,
			// A redirect is a failure (Standard Webhooks), and following one
			// would let a receiver point the server elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		schedule: cfg.RetrySchedule,
	}
}

// outcome is what one attempt came to.
type outcome struct {
	status     int
	retryAfter time.Duration
	err        error
}

// send POSTs body to target, signed with secret, as message id.
func (s *sender) send(ctx context.Context, target, id, secret string, body []byte) outcome {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return outcome{err: errors.New("the action's signing secret is unreadable")}
	}
	now := time.Now()
	sig, err := wh.Sign(id, now, body)
	if err != nil {
		return outcome{err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return outcome{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Appdor-Webhooks/1")
	req.Header.Set(standardwebhooks.HeaderWebhookID, id)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	res, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may carry a token; the run log has it already
		}
		return outcome{err: err}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	return outcome{status: res.StatusCode, retryAfter: retryAfter(res.Header.Get("Retry-After"), now)}
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if n, err := strconv.Atoi(h); err == nil && n > 0 {
		return min(time.Duration(n)*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}

// next is the wait before the attempt after attempt (1-based), jittered by
// ±20%, at least a receiver's Retry-After; false when attempt was the last.
func (s *sender) next(attempt int, ra time.Duration) (time.Duration, bool) {
	if attempt > len(s.schedule) {
		return 0, false
	}
	d := s.schedule[attempt-1]
	d = time.Duration(float64(d) * (0.8 + 0.4*mathrand.Float64()))
	return max(d, ra), true
}

// delivery is what an attempt needs of a claimed delivery.
type delivery struct {
	realm      uuid.UUID
	id         string
	attempts   int
	url        string
	payload    []byte
	queuedAt   time.Time
	automation uuid.UUID
	action     string
	run        uuid.UUID
	secret     string
}

// deliverNext claims one due delivery and makes one attempt; false when
// none was due. Reading the delivery and recording the answer run under a
// background seat of the realm; the request does not (see the package doc).
func (s *Service) deliverNext(ctx context.Context) bool {
	var d delivery
	realm, ok, err := s.deliveries.claim(ctx, s.deliveryLease(), &d.realm, &d.id, &d.attempts)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("automations: claiming a delivery", slog.String("error", err.Error()))
		}
		return false
	}
	if !ok {
		return false
	}
	defer s.deliveries.done(realm)
	if err := s.readDelivery(ctx, &d); err != nil {
		switch {
		case ctx.Err() != nil:
			s.abandon(ctx, s.deliveries, d.realm, d.id, d.attempts) // shutting down
		case appdor.ErrorCode(err) != appdor.ENotFound:
			s.log.Error("automations: reading a delivery", slog.String("realm", d.realm.String()), slog.String("error", err.Error()))
		}
		return true // gone with its automation, or replayed meanwhile, or shutting down
	}
	s.attempt(ctx, &d)
	return true
}

// deliveryLease is how long a claimed delivery is its worker's: its
// request's timeout and time to record the answer.
func (s *Service) deliveryLease() time.Duration {
	return max(s.cfg.Lease, s.cfg.DeliveryTimeout+30*time.Second)
}

// attempt sends a claimed delivery once, outside any seat, and records the
// answer under a background seat of its realm.
func (s *Service) attempt(ctx context.Context, d *delivery) {
	start := time.Now()
	out := s.sender.send(ctx, d.url, d.id, d.secret, d.payload)
	s.metrics.attempt.Observe(time.Since(start).Seconds())
	if ctx.Err() != nil {
		// Shutting down mid-request: the attempt is not counted, and the
		// same webhook-id is sent again, which receivers deduplicate on.
		s.abandon(ctx, s.deliveries, d.realm, d.id, d.attempts)
		return
	}
	// The answer is recorded even if the server is stopping meanwhile.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	release, err := s.acquire(rctx, d.realm)
	if err != nil {
		return
	}
	defer release()
	if err := s.wdb.TxBatch(rctx, d.realm, s.record(d, out), nil); err != nil {
		s.log.Error("automations: recording a delivery", slog.String("realm", d.realm.String()),
			slog.String("delivery", d.id), slog.String("error", err.Error()))
	}
}

// readDelivery reads what an attempt needs, under a background seat.
func (s *Service) readDelivery(ctx context.Context, d *delivery) error {
	release, err := s.acquire(ctx, d.realm)
	if err != nil {
		return err
	}
	defer release()
	return s.wdb.Query(ctx, d.realm, func(rows pgx.Rows) error {
		found := false
		for rows.Next() {
			found = true
			if err := rows.Scan(&d.url, &d.payload, &d.queuedAt, &d.automation, &d.action, &d.run, &d.secret); err != nil {
				return err
			}
		}
		if !found {
			return appdor.Errorf(appdor.ENotFound, "delivery gone")
		}
		return rows.Err()
	}, `SELECT d.url, d.payload, d.queued_at, d.automation_id, d.action_id, d.run_id, coalesce(a.secrets ->> d.action_id, '')
	    FROM webhook_deliveries d JOIN automations a ON a.realm_id = d.realm_id AND a.id = d.automation_id
	    WHERE d.realm_id = $1 AND d.id = $2 AND d.attempts = $3 AND d.state = 'pending'`, d.realm, d.id, d.attempts)
}

// record returns the statements that write an attempt's outcome and bring
// the run's status up to date, to run in one transaction.
func (s *Service) record(d *delivery, out outcome) *pgx.Batch {
	b := &pgx.Batch{}
	state, result := "pending", "retry"
	var wait time.Duration
	var lastError *string
	var status *int
	if out.status != 0 {
		status = &out.status
	}
	switch {
	case out.err == nil && out.status >= 200 && out.status < 300:
		state, result = "delivered", "delivered"
	case out.err == nil && out.status == http.StatusGone:
		state, result = "failed", "gone"
		msg := "the receiver answered 410 Gone; this webhook action is disabled"
		lastError = &msg
		b.Queue(`UPDATE automations SET updated_at = now(), actions = (
			   SELECT jsonb_agg(CASE WHEN x ->> 'id' = $3 THEN x || '{"disabled": true}'::jsonb ELSE x END ORDER BY n)
			   FROM jsonb_array_elements(actions) WITH ORDINALITY AS t(x, n))
			 WHERE realm_id = $1 AND id = $2`, d.realm, d.automation, d.action)
		b.Queue(`INSERT INTO audit_log (realm_id, actor, action, detail)
			 VALUES ($1, 'appdor', 'webhook_disabled', jsonb_build_object('automation_id', $2::uuid, 'action_id', $3::text, 'url', $4::text))`,
			d.realm, d.automation, d.action, d.url)
		s.log.Warn("automations: a webhook receiver answered 410 Gone; its action is disabled",
			slog.String("realm", d.realm.String()), slog.String("automation", d.automation.String()), slog.String("action", d.action))
	default:
		msg := ""
		if out.err != nil {
			msg = out.err.Error()
		} else {
			msg = "the receiver answered " + strconv.Itoa(out.status) + " " + http.StatusText(out.status)
		}
		lastError = &msg
		ra := time.Duration(0)
		if out.status == http.StatusTooManyRequests || out.status == http.StatusServiceUnavailable {
			ra = out.retryAfter
		}
		var more bool
		if wait, more = s.sender.next(d.attempts, ra); !more {
			state, result = "dead", "dead"
		}
	}
	s.metrics.deliveries.WithLabelValues(result).Inc()
	if state == "delivered" {
		s.metrics.latency.Observe(time.Since(d.queuedAt).Seconds())
	}
	b.Queue(`UPDATE webhook_deliveries SET state = $4, next_attempt_at = now() + $5::bigint * interval '1 millisecond',
		        last_status = $6, last_error = $7, delivered_at = CASE WHEN $4 = 'delivered' THEN now() END
		 WHERE realm_id = $1 AND id = $2 AND attempts = $3`,
		d.realm, d.id, d.attempts, state, wait.Milliseconds(), status, lastError)
	b.Queue(updateRunSQL, d.realm, d.run)
	return b
}

// updateRunSQL derives a run's status from its deliveries: pending while
// one is, then dead if one is dead, failed if one failed, else succeeded.
const updateRunSQL = `UPDATE automation_runs r SET status = s.status, attempts = s.attempts,
		        last_error = s.last_error,
		        finished_at = CASE WHEN s.status = 'pending' THEN NULL ELSE now() END
		 FROM (SELECT CASE WHEN bool_or(state = 'pending') THEN 'pending' WHEN bool_or(state = 'dead') THEN 'dead'
		                   WHEN bool_or(state = 'failed') THEN 'failed' ELSE 'succeeded' END AS status,
		              greatest(max(attempts), 1) AS attempts,
		              (array_agg(last_error) FILTER (WHERE last_error IS NOT NULL AND state <> 'delivered'))[1] AS last_error
		       FROM webhook_deliveries WHERE realm_id = $1 AND run_id = $2) s
		 WHERE r.realm_id = $1 AND r.id = $2`
