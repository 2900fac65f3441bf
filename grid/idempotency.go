package grid

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// IdempotencyHeader names the header a client sets to make a POST or PATCH
// safe to retry.
const IdempotencyHeader = "Idempotency-Key"

// idempotencyKey is what an Idempotency-Key may be (the column holds 1 to
// 255 characters).
var idempotencyKey = appdor.Text{Min: 1, Max: 255}

// readBody reads the whole request body (the server's body limit bounds it)
// so that it can be both hashed and decoded.
func readBody(c echo.Context) ([]byte, error) {
	b, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, appdor.Errorf(appdor.ETooLarge, "the request body is larger than %d bytes", mbe.Limit)
		}
		var he *echo.HTTPError
		if errors.As(err, &he) {
			return nil, he
		}
		return nil, appdor.Errorf(appdor.EInvalid, "reading the request body: %v", err)
	}
	return b, nil
}

// writeOnce runs a write in one transaction and answers status with its
// result. With an Idempotency-Key, the key is recorded in the same
// transaction as the write, together with the answer: a retry with the same
// key (same realm, same method and path) waits for the first to finish and
// gets its answer back, writing nothing; the same key with another body is a
// conflict. A write that fails leaves no key behind, so retrying it runs it
// again. Keys expire after a day.
func (h *Handler) writeOnce(c echo.Context, body []byte, status int, write func(ctx context.Context, tx pgx.Tx) (any, error)) error {
	ctx, realm := c.Request().Context(), RealmOf(c)
	key := c.Request().Header.Get(IdempotencyHeader)
	if key == "" {
		var out any
		err := h.writeTx(ctx, realm, func(ctx context.Context, tx pgx.Tx) (err error) {
			out, err = write(ctx, tx)
			return err
		})
		if err != nil {
			return err
		}
		return c.JSON(status, out)
	}
	if p := idempotencyKey.Problem(key); p != "" {
		return &appdor.Error{Code: appdor.EInvalid, Message: IdempotencyHeader + " " + p,
			Details: []appdor.Detail{{Field: IdempotencyHeader, Message: p}}}
	}
	route := c.Request().Method + " " + c.Request().URL.Path
	sum := sha256.Sum256(body)
	var (
		answer   []byte
		code     int
		replayed bool
	)
	err := h.writeTx(ctx, realm, func(ctx context.Context, tx pgx.Tx) error {
		var fresh bool
		// Each write clears up to a hundred of the realm's expired keys, so
		// the table stays bounded with no sweeper and no unbounded statement.
		err := tx.QueryRow(ctx,
			`WITH expired AS (
			   DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY (
			     SELECT ctid FROM idempotency_keys
			     WHERE realm_id = $1 AND created_at < now() - interval '24 hours' AND NOT (route = $2 AND key = $3)
			     LIMIT 100)))
			 INSERT INTO idempotency_keys (realm_id, route, key, request_hash) VALUES ($1, $2, $3, $4)
			 ON CONFLICT (realm_id, route, key) DO UPDATE
			   SET request_hash = EXCLUDED.request_hash, status = NULL, response = NULL, created_at = now()
			   WHERE idempotency_keys.created_at < now() - interval '24 hours'
			 RETURNING true`, realm, route, key, sum[:]).Scan(&fresh)
		if errors.Is(err, pgx.ErrNoRows) {
			var hash []byte
			var st *int
			if err := tx.QueryRow(ctx,
				`SELECT request_hash, status, response FROM idempotency_keys WHERE realm_id = $1 AND route = $2 AND key = $3`,
				realm, route, key).Scan(&hash, &st, &answer); err != nil {
				return err
			}
			if string(hash) != string(sum[:]) {
				return &appdor.Error{Code: appdor.EConflict,
					Message: "this Idempotency-Key was used with a different request body; use a new key",
					Details: map[string]string{"reason": "idempotency_key_reused"}}
			}
			if st == nil {
				return &appdor.Error{Code: appdor.EConflict, Message: "the first request with this Idempotency-Key is still running; retry"}
			}
			code, replayed = *st, true
			return nil
		}
		if err != nil {
			return err
		}
		out, err := write(ctx, tx)
		if err != nil {
			return err
		}
		if answer, err = json.Marshal(out); err != nil {
			return err
		}
		code = status
		_, err = tx.Exec(ctx,
			`UPDATE idempotency_keys SET status = $4, response = $5 WHERE realm_id = $1 AND route = $2 AND key = $3`,
			realm, route, key, code, answer)
		return err
	})
	if err != nil {
		return err
	}
	if replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	return c.JSONBlob(code, answer)
}
