package airtable

// Writing records: create (one or up to ten), update (PATCH merges, PUT
// replaces), upsert on fieldsToMergeOn, and delete. Each request is one
// transaction: all of its records are written, or none.

import (
	"encoding/json"
	"net/http"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/grid"
)

// recordInput is one record of a write.
type recordInput struct {
	ID     string    `json:"id,omitempty"`
	Fields rawFields `json:"fields"`
}

// writeBody is a create's or an update's body: records[] (or, for a
// single record, fields) and the options.
type writeBody struct {
	Records               []recordInput `json:"records"`
	Fields                rawFields     `json:"fields"`
	Typecast              bool          `json:"typecast"`
	ReturnFieldsByFieldID bool          `json:"returnFieldsByFieldId"`
	PerformUpsert         *struct {
		FieldsToMergeOn []string `json:"fieldsToMergeOn"`
	} `json:"performUpsert"`
}

// checkCount refuses an empty write and one of more than ten records.
func checkCount(n int) error {
	if n == 0 {
		return fail(TInvalidRecords, "Send at least one record in records")
	}
	if n > MaxRecordsPerWrite {
		return fail(TInvalidRecords, "A request takes at most %d records; this one has %d", MaxRecordsPerWrite, n)
	}
	return nil
}

// createRecords serves POST /v0/{base}/{table}: {"records":[{"fields"}]}
// answered with {"records":[…]}, or {"fields"} answered with the record.
func (h *Handler) createRecords(c echo.Context) error {
	t, err := h.table(c)
	if err != nil {
		return err
	}
	var in writeBody
	if err := decodeBody(c, &in); err != nil {
		return err
	}
	single := in.Records == nil && in.Fields != nil
	if single {
		in.Records = []recordInput{{Fields: in.Fields}}
	} else if in.Fields != nil {
		return fail(TInvalidRequest, "Send records or fields, not both")
	}
	if in.PerformUpsert != nil {
		return fail(TInvalidRequest, "performUpsert goes with PATCH or PUT, not POST")
	}
	if err := checkCount(len(in.Records)); err != nil {
		return err
	}
	cells := make([]map[string]json.RawMessage, len(in.Records))
	for i, r := range in.Records {
		if r.ID != "" {
			return fail(TInvalidRecords, "records[%d] has an id; a new record gets one", i)
		}
		if cells[i], err = cellsOf(t, r.Fields, in.Typecast); err != nil {
			return err
		}
	}
	rows, err := h.grid.Insert(c.Request().Context(), realmOf(c), t, cells)
	if err != nil {
		return writeError(t, err)
	}
	recs, err := records(t, rows, in.ReturnFieldsByFieldID)
	if err != nil {
		return err
	}
	if single {
		return c.JSON(http.StatusOK, recs[0])
	}
	return c.JSON(http.StatusOK, map[string]any{"records": recs})
}

func records(t *grid.Table, rows []grid.Row, byID bool) ([]record, error) {
	out := make([]record, len(rows))
	for i, r := range rows {
		var err error
		if out[i], err = recordOf(t, r, byID, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// updateRecords serves PATCH and PUT /v0/{base}/{table}: records[] with
// ids, or, with performUpsert, records matched on fieldsToMergeOn (created
// when none matches); answered with {"records":[…]}, and for an upsert
// createdRecords and updatedRecords.
func (h *Handler) updateRecords(replace bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, err := h.table(c)
		if err != nil {
			return err
		}
		var in writeBody
		if err := decodeBody(c, &in); err != nil {
			return err
		}
		if in.Fields != nil {
			return fail(TInvalidRequest, "An update of several records sends records[]; update one at /{table}/{record}")
		}
		if err := checkCount(len(in.Records)); err != nil {
			return err
		}
		w := grid.Write{Replace: replace, Updates: make([]grid.Update, len(in.Records))}
		if in.PerformUpsert != nil {
			names := in.PerformUpsert.FieldsToMergeOn
			if len(names) == 0 || len(names) > 3 {
				return fail(TInvalidRequest, "performUpsert.fieldsToMergeOn names one to three fields")
			}
			for _, name := range names {
				f := fieldRef(t, name)
				if f == nil {
					return fail(TUnknownField, "Unknown field name: %q", truncate(name))
				}
				if f.Type == grid.TypeLink || f.Type == grid.TypeMultiSelect || f.Type == grid.TypeCheckbox {
					return fail(TInvalidRequest, "performUpsert cannot merge on the %s field %q", airtableType[f.Type], f.Name)
				}
				w.MergeOn = append(w.MergeOn, f)
			}
		}
		for i, r := range in.Records {
			u := grid.Update{}
			if r.ID != "" {
				if u.ID, err = recordID(r.ID); err != nil {
					return err
				}
			} else if w.MergeOn == nil {
				return fail(TInvalidRecords, "records[%d] needs its id (or send performUpsert)", i)
			}
			if u.Cells, err = cellsOf(t, r.Fields, in.Typecast); err != nil {
				return err
			}
			w.Updates[i] = u
		}
		res, err := h.grid.Apply(c.Request().Context(), realmOf(c), t, w)
		if err != nil {
			return h.updateError(t, err)
		}
		recs, err := records(t, res.Rows, in.ReturnFieldsByFieldID)
		if err != nil {
			return err
		}
		out := map[string]any{"records": recs}
		if w.MergeOn != nil {
			created, updated := []string{}, []string{}
			for i, r := range res.Rows {
				if res.Created[i] {
					created = append(created, r.ID.String())
				} else {
					updated = append(updated, r.ID.String())
				}
			}
			out["createdRecords"], out["updatedRecords"] = created, updated
		}
		return c.JSON(http.StatusOK, out)
	}
}

// updateRecord serves PATCH and PUT /v0/{base}/{table}/{record}: {"fields"}
// answered with the record.
func (h *Handler) updateRecord(replace bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, id, err := h.tableRecord(c)
		if err != nil {
			return err
		}
		var in writeBody
		if err := decodeBody(c, &in); err != nil {
			return err
		}
		if in.Records != nil || in.PerformUpsert != nil {
			return fail(TInvalidRequest, "An update of one record sends {\"fields\": {…}}")
		}
		cells, err := cellsOf(t, in.Fields, in.Typecast)
		if err != nil {
			return err
		}
		res, err := h.grid.Apply(c.Request().Context(), realmOf(c), t,
			grid.Write{Replace: replace, Updates: []grid.Update{{ID: id, Cells: cells}}})
		if err != nil {
			return h.updateError(t, err)
		}
		rec, err := recordOf(t, res.Rows[0], in.ReturnFieldsByFieldID, nil)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, rec)
	}
}

// updateError names the record an update did not find, and translates a
// cell's validation error.
func (h *Handler) updateError(t *grid.Table, err error) error {
	if ae := asError(err); ae != nil && ae.Code == appdor.ENotFound {
		if d, ok := ae.Details.([]appdor.Detail); ok && len(d) > 0 {
			return fail(TNotFound, "Could not find a record to update: %s", d[0].Message)
		}
	}
	if ae := asError(err); ae != nil && ae.Code == appdor.EValidation {
		if d, ok := ae.Details.([]appdor.Detail); ok && len(d) > 0 && (d[0].Field == "fieldsToMergeOn" || d[0].Field == "id") {
			return fail(TInvalidRecords, "%s: %s", ae.Message, d[0].Message)
		}
	}
	return writeError(t, err)
}

// deleted is one deleted record as Airtable answers it.
type deleted struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}

// deleteRecords serves DELETE /v0/{base}/{table}?records[]=…: up to ten
// records, all or none; an id the table lacks is NOT_FOUND.
func (h *Handler) deleteRecords(c echo.Context) error {
	t, err := h.table(c)
	if err != nil {
		return err
	}
	qp := c.QueryParams()
	refs := append(qp["records[]"], qp["records"]...)
	for k, v := range qp {
		if len(k) > len("records[") && k[:len("records[")] == "records[" && k != "records[]" {
			refs = append(refs, v...)
		}
	}
	if err := checkCount(len(refs)); err != nil {
		return err
	}
	ids := make([]uuid.UUID, len(refs))
	for i, s := range refs {
		if ids[i], err = recordID(s); err != nil {
			return err
		}
	}
	if err := h.grid.Delete(c.Request().Context(), realmOf(c), t, ids); err != nil {
		return deleteError(err)
	}
	out := make([]deleted, len(ids))
	for i, id := range ids {
		out[i] = deleted{ID: id.String(), Deleted: true}
	}
	return c.JSON(http.StatusOK, map[string]any{"records": out})
}

// deleteRecord serves DELETE /v0/{base}/{table}/{record}.
func (h *Handler) deleteRecord(c echo.Context) error {
	t, id, err := h.tableRecord(c)
	if err != nil {
		return err
	}
	if err := h.grid.Delete(c.Request().Context(), realmOf(c), t, []uuid.UUID{id}); err != nil {
		return deleteError(err)
	}
	return c.JSON(http.StatusOK, deleted{ID: id.String(), Deleted: true})
}

func deleteError(err error) error {
	if ae := asError(err); ae != nil && ae.Code == appdor.ENotFound {
		if d, ok := ae.Details.([]appdor.Detail); ok && len(d) > 0 {
			return fail(TNotFound, "Could not find a record to delete: %s", d[0].Message)
		}
	}
	return err
}
