package grid

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// WriteTx is writeTx, for the test of AfterCommit.
func (h *Handler) WriteTx(ctx context.Context, realm uuid.UUID, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return h.writeTx(ctx, realm, fn)
}
