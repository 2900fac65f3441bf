package automations

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/grid"
	"github.com/appdor/appdor/tenancy"
)

// Action types.
const (
	ActionWebhook   = "webhook"
	ActionUpdateRow = "update_row"
	ActionCreateRow = "create_row"
)

// Limits.
const (
	maxAutomationsPerTable = 50
	maxActions             = 10
	maxURLLen              = 2000
	defaultRunsLimit       = 50
	maxRunsLimit           = 200
)

// Action is one thing an automation does.
type Action struct {
	// ID names the action; a webhook keeps its secret across edits that
	// keep its id.
	ID   string `json:"id"`
	Type string `json:"type"`
	// URL is a webhook's receiver.
	URL string `json:"url,omitempty"`
	// Secret is a webhook's signing secret, shown only in the answer that
	// made it.
	Secret string `json:"secret,omitempty"`
	// Disabled is set on a webhook whose receiver answered 410 Gone; send the
	// action again without it to enable it.
	Disabled bool `json:"disabled,omitempty"`
	// Table is the table create_row writes to, of the same app.
	Table *uuid.UUID `json:"table,omitempty"`
	// Cells are the cells update_row and create_row write: values, or
	// "{{FIELD_ID}}" to copy a field of the triggering row.
	Cells map[string]json.RawMessage `json:"cells,omitempty"`
}

// Automation is a table's automation.
type Automation struct {
	ID        uuid.UUID `json:"id"`
	TableID   uuid.UUID `json:"table_id"`
	Name      string    `json:"name"`
	Enabled   bool      `json:"enabled"`
	Trigger   Trigger   `json:"trigger"`
	Condition []string  `json:"condition"`
	Actions   []Action  `json:"actions"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// input is a create or a change; absent members stay as they are.
type input struct {
	Name      *string   `json:"name"`
	Enabled   *bool     `json:"enabled"`
	Trigger   *Trigger  `json:"trigger"`
	Condition *[]string `json:"condition"`
	Actions   *[]Action `json:"actions"`
}

// detail points at one wrong member of an automation.
type detail struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Routes registers the automations API on g, which the server has put
// behind authentication, the rate limiter and the fairness controller:
// editors manage automations, viewers read them and their runs.
func (s *Service) Routes(g *echo.Group) {
	read := tenancy.Require(tenancy.RoleViewer)
	write := tenancy.Require(tenancy.RoleEditor)
	g.POST("/tables/:table/automations", s.create, write)
	g.GET("/tables/:table/automations", s.list, read)
	g.GET("/tables/:table/automations/:automation", s.get, read)
	g.PATCH("/tables/:table/automations/:automation", s.update, write)
	g.DELETE("/tables/:table/automations/:automation", s.remove, write)
	g.GET("/tables/:table/automations/:automation/runs", s.runs, read)
	g.POST("/tables/:table/automations/:automation/runs/:run/replay", s.replay, write)
}

const automationColumns = `id, table_id, name, enabled, trigger, condition, actions, created_at, updated_at`

func scanAutomation(row pgx.Row, a *Automation, extra ...any) error {
	return row.Scan(append([]any{&a.ID, &a.TableID, &a.Name, &a.Enabled, &a.Trigger, &a.Condition, &a.Actions,
		&a.CreatedAt, &a.UpdatedAt}, extra...)...)
}

// listAutomationsSQL reads a table ($2) of realm $1's automations, oldest
// first; only the enabled ones when $3.
const listAutomationsSQL = `SELECT ` + automationColumns + ` FROM automations
	WHERE realm_id = $1 AND table_id = $2 AND (enabled OR NOT $3) ORDER BY created_at, id`

// listAutomations reads a table's automations, oldest first.
func listAutomations(ctx context.Context, tx pgx.Tx, realm, table uuid.UUID, enabledOnly bool) ([]Automation, error) {
	rows, err := tx.Query(ctx, listAutomationsSQL, realm, table, enabledOnly)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectAutomations(rows)
}

// collectAutomations reads the rows of listAutomationsSQL.
func collectAutomations(rows pgx.Rows) ([]Automation, error) {
	out := []Automation{}
	for rows.Next() {
		var a Automation
		if err := scanAutomation(rows, &a); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// getAutomation reads one automation of a table with its secrets, locked
// for update when the caller means to change it.
func getAutomation(ctx context.Context, tx pgx.Tx, realm, table, id uuid.UUID, lock bool) (*Automation, map[string]string, error) {
	sql := `SELECT ` + automationColumns + `, secrets FROM automations WHERE realm_id = $1 AND table_id = $2 AND id = $3`
	if lock {
		sql += ` FOR UPDATE`
	}
	var a Automation
	secrets := map[string]string{}
	if err := scanAutomation(tx.QueryRow(ctx, sql, realm, table, id), &a, &secrets); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil, appdor.Errorf(appdor.ENotFound, "automation not found")
		}
		return nil, nil, err
	}
	return &a, secrets, nil
}

func newActionID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "act_" + hex.EncodeToString(b)
}

// apply merges in into a and checks the result against the table; webhook
// actions new to a get a secret, which shown collects, and keep theirs
// otherwise.
func apply(ctx context.Context, tx pgx.Tx, realm uuid.UUID, t *grid.Table, in *input, a *Automation, secrets map[string]string, shown map[string]string) error {
	if in.Name != nil {
		a.Name = strings.TrimSpace(*in.Name)
	}
	if in.Enabled != nil {
		a.Enabled = *in.Enabled
	}
	if in.Trigger != nil {
		a.Trigger = *in.Trigger
	}
	if in.Condition != nil {
		a.Condition = *in.Condition
	}
	if a.Condition == nil {
		a.Condition = []string{}
	}
	if in.Actions != nil {
		known := map[string]bool{}
		for _, ac := range a.Actions {
			known[ac.ID] = true
		}
		a.Actions = *in.Actions
		kept := map[string]string{}
		for i := range a.Actions {
			ac := &a.Actions[i]
			ac.Secret = ""
			if ac.ID == "" || !known[ac.ID] {
				ac.ID = newActionID()
			}
			known[ac.ID] = false // an id given twice is new the second time
			if ac.Type != ActionWebhook {
				continue
			}
			if sec, ok := secrets[ac.ID]; ok {
				kept[ac.ID] = sec
			} else {
				kept[ac.ID] = newSecret()
				shown[ac.ID] = kept[ac.ID]
			}
		}
		clear(secrets)
		for k, v := range kept {
			secrets[k] = v
		}
	}
	details, err := validate(ctx, tx, realm, t, a)
	if err != nil {
		return err
	}
	if details != nil {
		return &appdor.Error{Code: appdor.EValidation, Message: "the automation is invalid; nothing was saved", Details: details}
	}
	return nil
}

// validate checks an automation against its table and returns what is wrong.
func validate(ctx context.Context, tx pgx.Tx, realm uuid.UUID, t *grid.Table, a *Automation) ([]detail, error) {
	var ds []detail
	bad := func(field, format string, args ...any) { ds = append(ds, detail{field, fmt.Sprintf(format, args...)}) }
	if n := utf8.RuneCountInString(a.Name); n < 1 || n > 200 || !utf8.ValidString(a.Name) {
		bad("name", "a name has 1 to 200 characters")
	}
	switch a.Trigger.Event {
	case grid.EventRowCreated, grid.EventRowUpdated, grid.EventRowDeleted:
	default:
		bad("trigger.event", "the event is one of row.created, row.updated, row.deleted")
	}
	if len(a.Trigger.Fields) > 0 && a.Trigger.Event != grid.EventRowUpdated {
		bad("trigger.fields", "only a row.updated trigger takes fields")
	}
	for i, f := range a.Trigger.Fields {
		if t.Field(f) == nil {
			bad(fmt.Sprintf("trigger.fields[%d]", i), "no field %q in this table", f)
		}
	}
	if len(a.Condition) > 0 && a.Trigger.Event == grid.EventRowDeleted {
		bad("condition", "a row.deleted trigger takes no condition: the rows are gone")
	} else if err := grid.CheckFilters(t, a.Condition); err != nil {
		bad("condition", "%s", conditionMessage(err))
	}
	if len(a.Actions) < 1 || len(a.Actions) > maxActions {
		bad("actions", "an automation has 1 to %d actions", maxActions)
	}
	for i, ac := range a.Actions {
		at := fmt.Sprintf("actions[%d]", i)
		switch ac.Type {
		case ActionWebhook:
			if ac.Table != nil || ac.Cells != nil {
				bad(at, "a webhook takes a url only")
			}
			if msg := checkURL(ac.URL); msg != "" {
				bad(at+".url", "%s", msg)
			}
		case ActionUpdateRow, ActionCreateRow:
			if ac.URL != "" || ac.Disabled {
				bad(at, "%s takes cells (and create_row a table), not a url", ac.Type)
			}
			if len(ac.Cells) == 0 {
				bad(at+".cells", "give at least one cell to write")
			}
			target := t
			if ac.Type == ActionUpdateRow {
				if ac.Table != nil {
					bad(at+".table", "update_row writes the triggering row; it takes no table")
				}
				if a.Trigger.Event == grid.EventRowDeleted {
					bad(at, "a row.deleted trigger has no row to update")
				}
			} else {
				if ac.Table == nil {
					bad(at+".table", "create_row needs the table to write to")
					continue
				}
				tt, err := grid.LoadTable(ctx, tx, realm, *ac.Table)
				if appdor.ErrorCode(err) == appdor.ENotFound {
					bad(at+".table", "no such table")
					continue
				}
				if err != nil {
					return nil, err
				}
				if tt.AppID != t.AppID {
					bad(at+".table", "create_row writes to a table of the same app")
					continue
				}
				target = tt
			}
			ds = append(ds, checkActionCells(at, t, target, ac.Cells, a.Trigger.Event == grid.EventRowDeleted)...)
		default:
			bad(at+".type", "the type is one of webhook, update_row, create_row")
		}
	}
	return ds, nil
}

// checkActionCells checks an action's cells: each a field of target, each
// template a field of the triggering table, each value one target takes.
func checkActionCells(at string, source, target *grid.Table, cells map[string]json.RawMessage, deleted bool) []detail {
	var ds []detail
	for id, v := range cells {
		where := at + ".cells." + id
		if target.Field(id) == nil {
			ds = append(ds, detail{where, "no such field in the table written"})
			continue
		}
		if f := templateField(v); f != "" {
			if deleted {
				ds = append(ds, detail{where, "a row.deleted trigger has no cells to copy"})
			} else if source.Field(f) == nil {
				ds = append(ds, detail{where, fmt.Sprintf("{{%s}} names no field of the triggering table", f)})
			}
			continue
		}
		if err := grid.CheckCells(target, map[string]json.RawMessage{id: v}); err != nil {
			ds = append(ds, detail{where, conditionMessage(err)})
		}
	}
	return ds
}

// conditionMessage is the message of a grid refusal, with its details.
func conditionMessage(err error) string {
	var ae *appdor.Error
	if !errors.As(err, &ae) {
		return err.Error()
	}
	if ds, ok := ae.Details.([]grid.Detail); ok && len(ds) > 0 {
		return ds[0].Message
	}
	return ae.Message
}

// checkURL returns what is wrong with a webhook URL, or "". Where it may
// point is checked when it is dialled (the SSRF guard), not here: DNS may
// answer differently then.
func checkURL(s string) string {
	if s == "" {
		return "a webhook needs a url"
	}
	if len(s) > maxURLLen {
		return fmt.Sprintf("a url has at most %d characters", maxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Hostname() == "" {
		return "the url is an absolute http or https URL"
	}
	if u.User != nil {
		return "the url may not carry a user or password"
	}
	return ""
}

// show returns a copy of a with the secrets of shown filled in.
func show(a *Automation, shown map[string]string) Automation {
	out := *a
	out.Actions = make([]Action, len(a.Actions))
	copy(out.Actions, a.Actions)
	for i := range out.Actions {
		out.Actions[i].Secret = shown[out.Actions[i].ID]
	}
	return out
}

// stored is the actions as stored: never with a secret.
func stored(actions []Action) []Action {
	out := make([]Action, len(actions))
	copy(out, actions)
	for i := range out {
		out[i].Secret = ""
	}
	return out
}

func (s *Service) create(c echo.Context) error {
	tableID, err := grid.IDParam(c, "table")
	if err != nil {
		return err
	}
	var in input
	if err := grid.DecodeJSON(c, &in); err != nil {
		return err
	}
	var ds []detail
	if in.Name == nil {
		ds = append(ds, detail{"name", "required"})
	}
	if in.Trigger == nil {
		ds = append(ds, detail{"trigger", "required"})
	}
	if in.Actions == nil {
		ds = append(ds, detail{"actions", "required"})
	}
	if ds != nil {
		return &appdor.Error{Code: appdor.EValidation, Message: "the automation is invalid; nothing was saved", Details: ds}
	}
	ctx, realm := c.Request().Context(), grid.RealmOf(c)
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	a := &Automation{ID: id, TableID: tableID, Enabled: true}
	shown := map[string]string{}
	err = s.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		t, err := grid.LoadTable(ctx, tx, realm, tableID)
		if err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM automations WHERE realm_id = $1 AND table_id = $2`, realm, tableID).Scan(&n); err != nil {
			return err
		}
		if n >= maxAutomationsPerTable {
			return appdor.Errorf(appdor.EValidation, "a table has at most %d automations", maxAutomationsPerTable)
		}
		secrets := map[string]string{}
		if err := apply(ctx, tx, realm, t, &in, a, secrets, shown); err != nil {
			return err
		}
		return tx.QueryRow(ctx,
			`INSERT INTO automations (realm_id, id, table_id, name, enabled, trigger, condition, actions, secrets)
			 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING created_at, updated_at`,
			realm, a.ID, tableID, a.Name, a.Enabled, a.Trigger, a.Condition, stored(a.Actions), secrets).
			Scan(&a.CreatedAt, &a.UpdatedAt)
	})
	if err != nil {
		return err
	}
	s.triggers.forget(realm, tableID)
	return c.JSON(http.StatusCreated, show(a, shown))
}

func (s *Service) list(c echo.Context) error {
	tableID, err := grid.IDParam(c, "table")
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), grid.RealmOf(c)
	var out []Automation
	err = s.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		if _, err := grid.LoadTable(ctx, tx, realm, tableID); err != nil {
			return err
		}
		out, err = listAutomations(ctx, tx, realm, tableID, false)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"automations": out})
}

func (s *Service) get(c echo.Context) error {
	tableID, err := grid.IDParam(c, "table")
	if err != nil {
		return err
	}
	id, err := grid.IDParam(c, "automation")
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), grid.RealmOf(c)
	var a *Automation
	err = s.db.Tx(ctx, realm, func(tx pgx.Tx) (err error) {
		a, _, err = getAutomation(ctx, tx, realm, tableID, id, false)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a)
}

func (s *Service) update(c echo.Context) error {
	tableID, err := grid.IDParam(c, "table")
	if err != nil {
		return err
	}
	id, err := grid.IDParam(c, "automation")
	if err != nil {
		return err
	}
	var in input
	if err := grid.DecodeJSON(c, &in); err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), grid.RealmOf(c)
	var a *Automation
	shown := map[string]string{}
	err = s.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		var secrets map[string]string
		var err error
		if a, secrets, err = getAutomation(ctx, tx, realm, tableID, id, true); err != nil {
			return err
		}
		t, err := grid.LoadTable(ctx, tx, realm, tableID)
		if err != nil {
			return err
		}
		if err := apply(ctx, tx, realm, t, &in, a, secrets, shown); err != nil {
			return err
		}
		return tx.QueryRow(ctx,
			`UPDATE automations SET name = $4, enabled = $5, trigger = $6, condition = $7, actions = $8, secrets = $9, updated_at = now()
			 WHERE realm_id = $1 AND table_id = $2 AND id = $3 RETURNING updated_at`,
			realm, tableID, id, a.Name, a.Enabled, a.Trigger, a.Condition, stored(a.Actions), secrets).Scan(&a.UpdatedAt)
	})
	if err != nil {
		return err
	}
	s.triggers.forget(realm, tableID)
	return c.JSON(http.StatusOK, show(a, shown))
}

func (s *Service) remove(c echo.Context) error {
	tableID, err := grid.IDParam(c, "table")
	if err != nil {
		return err
	}
	id, err := grid.IDParam(c, "automation")
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), grid.RealmOf(c)
	err = s.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM automations WHERE realm_id = $1 AND table_id = $2 AND id = $3`, realm, tableID, id)
		if err == nil && tag.RowsAffected() == 0 {
			err = appdor.Errorf(appdor.ENotFound, "automation not found")
		}
		return err
	})
	if err != nil {
		return err
	}
	s.triggers.forget(realm, tableID)
	return c.NoContent(http.StatusNoContent)
}

// Run is one run of an automation: an event its trigger fired and its
// condition kept rows of, with the webhook deliveries it made.
type Run struct {
	ID           uuid.UUID   `json:"id"`
	AutomationID uuid.UUID   `json:"automation_id"`
	Event        string      `json:"event"`
	RowIDs       []uuid.UUID `json:"row_ids"`
	Hop          int         `json:"hop"`
	Status       string      `json:"status"`
	Attempts     int         `json:"attempts"`
	QueuedAt     time.Time   `json:"queued_at"`
	StartedAt    time.Time   `json:"started_at"`
	FinishedAt   *time.Time  `json:"finished_at"`
	LatencyMS    *int64      `json:"latency_ms"`
	LastError    *string     `json:"last_error"`
	Deliveries   []Delivery  `json:"deliveries"`
}

// Delivery is one webhook delivery of a run; its id is the webhook-id.
type Delivery struct {
	ID            string     `json:"id"`
	URL           string     `json:"url"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	LastStatus    *int       `json:"last_status"`
	LastError     *string    `json:"last_error"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	DeliveredAt   *time.Time `json:"delivered_at"`
}

const runColumns = `id, automation_id, event, row_ids, hop, status, attempts, queued_at, started_at, finished_at, last_error`

func scanRun(row pgx.Row, r *Run) error {
	err := row.Scan(&r.ID, &r.AutomationID, &r.Event, &r.RowIDs, &r.Hop, &r.Status, &r.Attempts, &r.QueuedAt,
		&r.StartedAt, &r.FinishedAt, &r.LastError)
	if err == nil && r.FinishedAt != nil {
		ms := r.FinishedAt.Sub(r.QueuedAt).Milliseconds()
		r.LatencyMS = &ms
	}
	r.Deliveries = []Delivery{}
	return err
}

// withDeliveries fills in the deliveries of runs.
func withDeliveries(ctx context.Context, tx pgx.Tx, realm uuid.UUID, runs []Run) error {
	if len(runs) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(runs))
	at := make(map[uuid.UUID]int, len(runs))
	for i, r := range runs {
		ids[i], at[r.ID] = r.ID, i
	}
	rows, err := tx.Query(ctx,
		`SELECT run_id, id, url, state, attempts, last_status, last_error,
		        CASE WHEN state = 'pending' THEN next_attempt_at END, delivered_at
		 FROM webhook_deliveries WHERE realm_id = $1 AND run_id = ANY($2) ORDER BY created_at, id`, realm, ids)
	if err != nil {
		return err
	}
	var run uuid.UUID
	var d Delivery
	_, err = pgx.ForEachRow(rows, []any{&run, &d.ID, &d.URL, &d.State, &d.Attempts, &d.LastStatus, &d.LastError,
		&d.NextAttemptAt, &d.DeliveredAt}, func() error {
		i := at[run]
		runs[i].Deliveries = append(runs[i].Deliveries, d)
		return nil
	})
	return err
}

// runs serves the run log, newest first, a page at a time: next_cursor,
// when set, reads the next (older) page.
func (s *Service) runs(c echo.Context) error {
	tableID, err := grid.IDParam(c, "table")
	if err != nil {
		return err
	}
	id, err := grid.IDParam(c, "automation")
	if err != nil {
		return err
	}
	limit := defaultRunsLimit
	if v := c.QueryParam("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > maxRunsLimit {
			return &appdor.Error{Code: appdor.EInvalid, Message: fmt.Sprintf("limit is a whole number from 1 to %d", maxRunsLimit),
				Details: map[string]string{"parameter": "limit"}}
		}
	}
	var before *uuid.UUID
	if v := c.QueryParam("cursor"); v != "" {
		b, err := uuid.Parse(v)
		if err != nil {
			return &appdor.Error{Code: appdor.EInvalid, Message: "cursor is not one this server gave out",
				Details: map[string]string{"parameter": "cursor"}}
		}
		before = &b
	}
	ctx, realm := c.Request().Context(), grid.RealmOf(c)
	out := []Run{}
	err = s.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		if _, _, err := getAutomation(ctx, tx, realm, tableID, id, false); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+runColumns+` FROM automation_runs
			WHERE realm_id = $1 AND automation_id = $2 AND ($3::uuid IS NULL OR id < $3)
			ORDER BY id DESC LIMIT $4`, realm, id, before, limit+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r Run
			if err := scanRun(rows, &r); err != nil {
				return err
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		if len(out) > limit {
			out = out[:limit]
		}
		return withDeliveries(ctx, tx, realm, out)
	})
	if err != nil {
		return err
	}
	var next *string
	if len(out) == limit {
		n := out[limit-1].ID.String()
		next = &n
	}
	return c.JSON(http.StatusOK, map[string]any{"runs": out, "next_cursor": next})
}

// replay sends a run's failed and dead deliveries again, each with its own
// webhook-id, from a fresh retry schedule.
func (s *Service) replay(c echo.Context) error {
	tableID, err := grid.IDParam(c, "table")
	if err != nil {
		return err
	}
	id, err := grid.IDParam(c, "automation")
	if err != nil {
		return err
	}
	runID, err := grid.IDParam(c, "run")
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), grid.RealmOf(c)
	var r Run
	err = s.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		if _, _, err := getAutomation(ctx, tx, realm, tableID, id, false); err != nil {
			return err
		}
		if err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM automation_runs
			WHERE realm_id = $1 AND automation_id = $2 AND id = $3`, realm, id, runID), &r); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return appdor.Errorf(appdor.ENotFound, "run not found")
			}
			return err
		}
		tag, err := tx.Exec(ctx,
			`UPDATE webhook_deliveries SET state = 'pending', attempts = 0, next_attempt_at = now(), delivered_at = NULL
			 WHERE realm_id = $1 AND run_id = $2 AND state IN ('failed', 'dead')`, realm, runID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return appdor.Errorf(appdor.EConflict, "this run has no failed or dead webhook delivery to replay")
		}
		if _, err := tx.Exec(ctx, updateRunSQL, realm, runID); err != nil {
			return err
		}
		if err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM automation_runs WHERE realm_id = $1 AND id = $2`, realm, runID), &r); err != nil {
			return err
		}
		rs := []Run{r}
		err = withDeliveries(ctx, tx, realm, rs)
		r = rs[0]
		return err
	})
	if err != nil {
		return err
	}
	if s.deliveries != nil {
		s.deliveries.poke()
	}
	s.poke()
	return c.JSON(http.StatusAccepted, r)
}
