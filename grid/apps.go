package grid

import (
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// App groups a realm's tables.
type App struct {
	ID        uuid.UUID `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

func (h *Handler) createApp(c echo.Context) error {
	var in struct {
		Name string `json:"name"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	name, err := appdor.CheckName("name", in.Name)
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), RealmOf(c)
	a := App{Name: name}
	err = h.db.Query(ctx, realm, func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&a.ID, &a.CreatedAt}, func() error { return nil })
		return err
	}, `INSERT INTO apps (realm_id, name) VALUES ($1, $2) RETURNING id, created_at`, realm, name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, a)
}

func (h *Handler) listApps(c echo.Context) error {
	apps, err := h.Apps(c.Request().Context(), RealmOf(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"apps": apps})
}
