package grid

import (
	"reflect"
	"testing"

	"github.com/google/uuid"
)

// A plain read's statement is rendered once per shape and kept; the kept
// statement and its parameters must be what rendering gives, for every
// shape.
func TestPlainStatementsAreWhatRenderingGives(t *testing.T) {
	realm, table, after := uuid.New(), uuid.New(), uuid.New()
	for shape := range 8 {
		q := &readQuery{realm: realm, table: table, limit: 100, fields: shape&4 != 0}
		if shape&1 != 0 {
			q.q = "needle"
		}
		if shape&2 != 0 {
			q.after = &cursor{After: after}
		}
		plainStatements.Clear()
		rendered, renderedArgs := q.pageSQL()
		if _, ok := plainStatements.Load(uint8(shape)); !ok {
			t.Fatalf("shape %d: the statement was not kept", shape)
		}
		kept, keptArgs := q.pageSQL()
		if kept != rendered || !reflect.DeepEqual(keptArgs, renderedArgs) {
			t.Fatalf("shape %d: kept %q %v, rendered %q %v", shape, kept, keptArgs, rendered, renderedArgs)
		}
		requireSQLUsesArgs(t, kept, keptArgs)
	}
	// A sorted or filtered read is rendered every time, never kept.
	plainStatements.Clear()
	tb := fuzzTable()
	keys, err := parseSort(tb, "-number")
	if err != nil {
		t.Fatal(err)
	}
	q := &readQuery{realm: realm, table: table, limit: 100, keys: keys, fields: true}
	sql, args := q.pageSQL()
	requireSQLUsesArgs(t, sql, args)
	plainStatements.Range(func(k, _ any) bool {
		t.Fatalf("a sorted read was kept as shape %v", k)
		return false
	})
}
