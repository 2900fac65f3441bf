package grid

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// Table is a user table: its fields in order.
type Table struct {
	ID        uuid.UUID `json:"id"`
	AppID     uuid.UUID `json:"app_id"`
	Name      string    `json:"name"`
	Fields    []Field   `json:"fields"`
	CreatedAt time.Time `json:"created_at"`
}

func (t *Table) field(id string) *Field {
	for i := range t.Fields {
		if t.Fields[i].ID.String() == id {
			return &t.Fields[i]
		}
	}
	return nil
}

// FieldInput is a field as a client defines it.
type FieldInput struct {
	Name    string       `json:"name"`
	Type    FieldType    `json:"type"`
	Options FieldOptions `json:"options"`
}

// Detail points at one wrong part of a request.
type Detail = appdor.Detail

// The query that loads a table with its fields; a table with no fields comes
// back as one row whose field columns are NULL, and an invisible table as none.
const tableSQL = `
SELECT t.id, t.app_id, t.name, t.created_at, f.id, f.name, f.type, f.options, f.position
FROM tables t
LEFT JOIN fields f ON f.realm_id = t.realm_id AND f.table_id = t.id
WHERE t.realm_id = $1 AND t.id = $2
ORDER BY f.position, f.id`

func scanTable(rows pgx.Rows) (*Table, error) {
	var t *Table
	for rows.Next() {
		var (
			tt           Table
			fid          *uuid.UUID
			fname, ftype *string
			foptions     []byte
			fposition    *int
		)
		if err := rows.Scan(&tt.ID, &tt.AppID, &tt.Name, &tt.CreatedAt, &fid, &fname, &ftype, &foptions, &fposition); err != nil {
			return nil, err
		}
		if t == nil {
			tt.Fields = []Field{}
			t = &tt
		}
		if fid != nil {
			f := Field{ID: *fid, Name: *fname, Type: FieldType(*ftype), Position: *fposition}
			if err := json.Unmarshal(foptions, &f.Options); err != nil {
				return nil, err
			}
			t.Fields = append(t.Fields, f)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if t == nil {
		return nil, appdor.Errorf(appdor.ENotFound, "table not found")
	}
	return t, nil
}

// loadTable reads a table and its fields inside a transaction.
func loadTable(ctx context.Context, tx pgx.Tx, realm, id uuid.UUID) (*Table, error) {
	rows, err := tx.Query(ctx, tableSQL, realm, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanTable(rows)
}

func checkFields(in []FieldInput) []Detail {
	var details []Detail
	seen := map[string]bool{}
	for i, f := range in {
		member, msg := checkField(f.Name, f.Type, f.Options)
		key := strings.ToLower(strings.TrimSpace(f.Name))
		if msg == "" && seen[key] {
			member, msg = "name", "another field has this name"
		}
		seen[key] = true
		if msg != "" {
			details = append(details, Detail{Row: &i, Field: member, Message: msg})
		}
	}
	return details
}

func (h *Handler) createTable(c echo.Context) error {
	appID, err := IDParam(c, "app")
	if err != nil {
		return err
	}
	var in struct {
		Name   string       `json:"name"`
		Fields []FieldInput `json:"fields"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	name, err := appdor.CheckName("name", in.Name)
	if err != nil {
		return err
	}
	if len(in.Fields) > maxFields {
		return appdor.Errorf(appdor.EValidation, "a table has at most %d fields", maxFields)
	}
	if d := checkFields(in.Fields); d != nil {
		return appdor.Invalid("some fields are invalid", d...)
	}
	ctx, realm := c.Request().Context(), RealmOf(c)
	var t *Table
	err = h.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		var tableID uuid.UUID
		err := tx.QueryRow(ctx,
			`INSERT INTO tables (realm_id, app_id, name)
			 SELECT realm_id, id, $3 FROM apps WHERE realm_id = $1 AND id = $2
			 RETURNING id`, realm, appID, name).Scan(&tableID)
		if err != nil {
			if err == pgx.ErrNoRows {
				return appdor.Errorf(appdor.ENotFound, "app not found")
			}
			return err
		}
		if len(in.Fields) > 0 {
			names := make([]string, len(in.Fields))
			types := make([]string, len(in.Fields))
			options := make([][]byte, len(in.Fields))
			for i, f := range in.Fields {
				if err := checkLinkTarget(ctx, tx, realm, appID, f.Options); err != nil {
					return err
				}
				names[i] = strings.TrimSpace(f.Name)
				types[i] = string(f.Type)
				options[i], _ = json.Marshal(f.Options)
			}
			_, err = tx.Exec(ctx,
				`INSERT INTO fields (realm_id, table_id, name, type, options, position)
				 SELECT $1, $2, n, t, o, p - 1
				 FROM unnest($3::text[], $4::text[], $5::jsonb[]) WITH ORDINALITY AS f(n, t, o, p)`,
				realm, tableID, names, types, options)
			if err != nil {
				return err
			}
		}
		t, err = loadTable(ctx, tx, realm, tableID)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, t)
}

func (h *Handler) getTable(c echo.Context) error {
	id, err := IDParam(c, "table")
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), RealmOf(c)
	var t *Table
	err = h.db.Query(ctx, realm, func(rows pgx.Rows) (err error) {
		t, err = scanTable(rows)
		return err
	}, tableSQL, realm, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

func (h *Handler) listTables(c echo.Context) error {
	appID, err := IDParam(c, "app")
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), RealmOf(c)
	type tableRef struct {
		ID        uuid.UUID `json:"id"`
		Name      string    `json:"name"`
		CreatedAt time.Time `json:"created_at"`
	}
	tables := []tableRef{}
	found := false
	err = h.db.Query(ctx, realm, func(rows pgx.Rows) error {
		for rows.Next() {
			found = true
			var id *uuid.UUID
			var name *string
			var at *time.Time
			if err := rows.Scan(&id, &name, &at); err != nil {
				return err
			}
			if id != nil {
				tables = append(tables, tableRef{ID: *id, Name: *name, CreatedAt: *at})
			}
		}
		return rows.Err()
	}, `SELECT t.id, t.name, t.created_at
	    FROM apps a LEFT JOIN tables t ON t.realm_id = a.realm_id AND t.app_id = a.id
	    WHERE a.realm_id = $1 AND a.id = $2
	    ORDER BY t.created_at, t.id`, realm, appID)
	if err != nil {
		return err
	}
	if !found {
		return appdor.Errorf(appdor.ENotFound, "app not found")
	}
	return c.JSON(http.StatusOK, map[string]any{"tables": tables})
}
