package formula

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// testRows are the rows of the test table t, by id.
var testRows = []struct {
	id    int
	cells string
}{
	{1, `{"name": "Alice", "full": "Alice Smith", "status": "Done", "count": 5, "price": 9.99, "done": true,
		"due": "2024-05-01", "start": "2024-01-01T00:00:00Z", "end": "2024-01-04T12:00:00Z"}`},
	{2, `{"name": "bob", "status": "Todo", "count": 1, "price": 0, "done": false,
		"due": "2024-07-15", "start": "2024-03-01T10:00:00Z", "end": "2024-03-02T09:00:00Z"}`},
	{3, `{"name": "Carol x", "status": "Done", "count": 2, "done": true,
		"start": "2024-01-31T00:00:00Z", "end": "2024-03-01T00:00:00Z"}`},
	{4, `{}`},
	{5, `{"name": "ALICE", "status": "Done", "count": 10, "price": 2.5,
		"due": "2024-06-01", "start": "2024-06-01T00:00:00Z", "end": "2023-06-01T00:00:00Z"}`},
	{6, `{"name": "it's \"q\" \\ x", "count": -3.5, "big": 1.5e308, "tiny": 5e-324}`},
	// Values of the wrong JSON type read as empty.
	{7, `{"name": 5, "count": "7", "done": "yes", "due": 12, "start": 12, "status": null}`},
}

var (
	dbOnce sync.Once
	dbConn *pgx.Conn
	dbErr  error
)

// openDB opens, once per process, the connection with the temporary table
// t that the tests and fuzz targets share.
func openDB() (*pgx.Conn, error) {
	dbOnce.Do(func() {
		url := os.Getenv("APPDOR_TEST_DATABASE_URL")
		if url == "" {
			url = "postgres://root@127.0.0.1:5432/postgres?sslmode=disable"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		db, err := pgx.Connect(ctx, url)
		if err != nil {
			dbErr = err
			return
		}
		// A zone far from UTC, so that SQL that depends on the session's
		// zone shows.
		_, err = db.Exec(ctx, `SET statement_timeout = '10s'; SET TimeZone = 'Pacific/Auckland'`)
		if err == nil {
			_, err = db.Exec(ctx, `CREATE TEMP TABLE t (id int PRIMARY KEY, cells jsonb NOT NULL)`)
		}
		for _, r := range testRows {
			if err == nil {
				_, err = db.Exec(ctx, `INSERT INTO t VALUES ($1, $2::jsonb)`, r.id, r.cells)
			}
		}
		if err != nil {
			db.Close(ctx)
			dbErr = err
			return
		}
		dbConn = db
	})
	return dbConn, dbErr
}

// testDB is the shared connection; it skips tb when there is no database.
func testDB(tb testing.TB) *pgx.Conn {
	tb.Helper()
	db, err := openDB()
	if err != nil {
		tb.Skipf("no database: %v", err)
	}
	return db
}

// where is the ids of the rows of t for which src holds.
func where(db *pgx.Conn, src string) ([]int, error) {
	n, err := Parse(src)
	if err != nil {
		return nil, err
	}
	env := &testEnv{}
	cond, err := Condition(n, env)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(context.Background(), "SELECT id FROM t WHERE "+cond+" ORDER BY id", env.args...)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, cond)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, cond)
	}
	return ids, nil
}

// Test conditions, and the rows of t each keeps.
var conditionTests = []struct {
	src string
	ids []int
}{
	// Airtable's documented kinds of filterByFormula.
	{`AND({Status} = 'Done', {Count} > 3)`, []int{1, 5}},
	{`FIND('x', {Name})`, []int{3, 6}},
	{`IS_BEFORE({Due}, '2024-06-01')`, []int{1}},
	{`DATETIME_DIFF({End}, {Start}, 'days') > 2`, []int{1, 3}},
	{`LOWER({Name}) = 'alice'`, []int{1, 5}},
	{`{Name} = BLANK()`, []int{4, 7}},
	{`NOT({Done})`, []int{2, 4, 5, 6, 7}},
	{`IF({Count} > 1, 'many', 'few') = 'many'`, []int{1, 3, 5}},
	{`{Count} / 0`, nil},
	{`OR({Status} = 'Todo', {Count} >= 10)`, []int{2, 5}},
	{`Status = 'Done'`, []int{1, 3, 5}},
	{`{Full Name} = 'Alice Smith'`, []int{1}},
	{`AND({Status} = 'Done', OR(FIND('ALICE', UPPER({Name})), {Count} < 3))`, []int{1, 3, 5}},

	// Blanks.
	{`{Count} = 0`, []int{4, 7}},
	{`{Count} = BLANK()`, []int{4, 7}},
	{`BLANK() = {Count}`, []int{4, 7}},
	{`{Count} = ''`, []int{4, 7}},
	{`{Name} = ""`, []int{4, 7}},
	{`{Name} != ""`, []int{1, 2, 3, 5, 6}},
	{`{Count}`, []int{1, 2, 3, 5, 6}},
	{`{Name}`, []int{1, 2, 3, 5, 6}},
	{`{Done}`, []int{1, 3}},
	{`{Due}`, []int{1, 2, 5}},
	{`{Due} = BLANK()`, []int{3, 4, 6, 7}},
	{`{Due} = ''`, []int{3, 4, 6, 7}},
	{`{Due} != BLANK()`, []int{1, 2, 5}},
	{`{Due} < '2030-01-01'`, []int{1, 2, 5}},
	{`{Due} > '2000-01-01'`, []int{1, 2, 5}},
	{`{Due} <= BLANK()`, nil},
	{`{Due} = {Due}`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`{Done} = BLANK()`, []int{2, 4, 5, 6, 7}},
	{`BLANK()`, nil},
	{`BLANK() = BLANK()`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`IF({Done}, BLANK(), 'x')`, []int{2, 4, 5, 6, 7}},
	{`IF({Done}, BLANK())`, nil},
	{`IF({Count} > 3, {Due})`, []int{1, 5}},
	{`SEARCH('z', {Name}) = BLANK()`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`LEN({Name}) = 0`, []int{4, 7}},
	{`{Name} & {Status} = ''`, []int{4, 7}},
	{`{Count} + 1 = 1`, []int{4, 7}},

	// Errors: a division by zero, a date difference of a blank date.
	{`{Count} / 0 = BLANK()`, nil},
	{`{Count} / 0 = 0`, nil},
	{`{Count} / 0 != 0`, nil},
	{`NOT({Count} / 0)`, nil},
	{`NOT({Count} / 0 = 1)`, nil},
	{`-({Count} / 0) < 1`, nil},
	{`{Count} / 0 + 1 > 0`, nil},
	{`{Count} / {Price} > 0`, []int{1, 5}},
	{`IF({Count} / 0, 'a', 'b') = 'b'`, nil},
	{`IF({Count} / 0, 'a', 'b') != 'a'`, nil},
	{`IF({Done}, {Count} / 0, 0) = 0`, []int{2, 4, 5, 6, 7}},
	{`IF({Done}, {Count}) = 0`, []int{2, 4, 5, 6, 7}},
	{`IF({Done}, BLANK(), {Count} / 0) = BLANK()`, []int{1, 3}},
	{`{Count} / 0 & '' = ''`, nil},
	{`LEN({Name} & {Count} / 0) = 0`, nil},
	{`LOWER({Count} / 0) = ''`, nil},
	{`FIND('x', {Name} & {Count} / 0) = 0`, nil},
	{`FIND('x', {Name}, {Count} / 0) = 0`, nil},
	{`SEARCH('z', {Name} & {Count} / 0) = BLANK()`, nil},
	{`({Count} / 0 = 1) = FALSE()`, nil},
	{`AND({Count} / 0 = 1, TRUE)`, nil},
	{`DATETIME_DIFF({Due}, {Start}) = BLANK()`, []int{5}},
	{`({Count} / {Price}) * 100 > 100`, []int{5}},
	{`({Count} / {Price} + {Big}) * 2 > 1`, []int{1, 5}},
	{`({Big} / {Count}) * {Big} * {Big} / 0.5 < 0`, []int{6}},
	{`({Count} / {Price} + {Big}) * {Big} * {Big} * {Big} = 0`, []int{1, 5}},
	{`DATETIME_DIFF({Due}, {Start}, 'M') & '' = ''`, nil},
	{`IS_BEFORE({Due}, '2030-01-01') = IS_BEFORE({Due}, '2030-01-01')`, []int{1, 2, 3, 4, 5, 6, 7}},

	// Literals.
	{`TRUE`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`FALSE`, nil},
	{`1`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`0`, nil},
	{`'a'`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`''`, nil},
	{`TRUE() = 1`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`0.1 + 0.2 = 0.3`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`{Name} = "it's \"q\" \\ x"`, []int{6}},
	{`{Name} = 'it\'s "q" \\ x'`, []int{6}},
	{`{Name} = '\'; DROP TABLE t; --'`, nil},

	// Numbers.
	{`{Count} + {Price} > 10`, []int{1, 5}},
	{`{Count} * 2 = 10`, []int{1}},
	{`{Count} - 1 = -4.5`, []int{6}},
	{`-{Count} > 0`, []int{6}},
	{`{Count} / {Price} > 1`, []int{5}},
	{`{Count} = '10'`, []int{5}},
	{`'5' = {Count}`, []int{1}},
	{`{Count} > ' 4.5 '`, []int{1, 5}},
	{`{Count} + '1' = 6`, []int{1}},
	{`{Done} = 1`, []int{1, 3}},
	{`{Done} + 1 = 2`, []int{1, 3}},
	{`{Done} = TRUE()`, []int{1, 3}},
	{`{Done} = FALSE()`, []int{2, 4, 5, 6, 7}},
	{`{Count} >= 2 = TRUE()`, []int{1, 3, 5}},
	{`IF({Done}, {Count}, 0) > 1`, []int{1, 3}},
	{`{Count} * 2 + 1 = 11`, []int{1}},
	{`({Count} + 1) * 2 = 12`, []int{1}},
	{`{Count} / 2 * 4 = 20`, []int{5}},
	{`-{Count} * -{Count} = 25`, []int{1}},
	{`{Big} * {Big} > 0`, []int{6}},
	{`{Big} * {Big} * {Big} * {Big} / {Tiny} > 1e300`, nil},
	{`{Big} / {Tiny}`, nil},
	{`{Big} / ({Tiny} * {Tiny}) * 1e300 / 1e-300`, nil},
	{`{Big} / 1e-300 / 1e-300 / 1e-300 > 0`, []int{6}},
	{`{Tiny} * {Tiny} = 0`, []int{1, 2, 3, 4, 5, 7}},
	{`{Tiny} > 0`, []int{6}},
	{`1 / 3 * 3 < 1`, []int{1, 2, 3, 4, 5, 6, 7}},

	// Text.
	{`{Name} & '!' = 'bob!'`, []int{2}},
	{`{Count} & '' = '5'`, []int{1}},
	{`{Price} & '' = '9.99'`, []int{1}},
	{`{Count} & '' = '-3.5'`, []int{6}},
	{`{Count} / 4 & '' = '1.25'`, []int{1}},
	{`{Done} & '' = '1'`, []int{1, 3}},
	{`{Due} & '' = '2024-05-01T00:00:00.000Z'`, []int{1}},
	{`{End} & '' = '2024-01-04T12:00:00.000Z'`, []int{1}},
	{`LEN({Name}) = 5`, []int{1, 5}},
	{`LEN({Name} & {Count}) = 6`, []int{1}},
	{`UPPER({Name}) = 'BOB'`, []int{2}},
	{`TRIM('  ' & {Name} & '\t\n') = 'bob'`, []int{2}},
	{`{Name} < 'B'`, []int{1, 4, 5, 7}},
	{`{Name} = 'alice'`, nil},
	{`SEARCH('x', {Name})`, []int{3, 6}},
	{`SEARCH('a', {Name})`, []int{3}},
	{`FIND('z', {Name}) = 0`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`FIND('l', {Name}, 1) = 2`, []int{1}},
	{`FIND('o', {Name}, 1)`, []int{2, 3}},
	{`FIND('o', {Name}, 2) = 4`, []int{3}},
	{`FIND('o', {Name}, {Count} - 1) = 4`, []int{3}},
	{`FIND('o', {Name}, -5) = 2`, []int{2}},
	{`FIND('o', {Name}, 1e300)`, nil},
	{`FIND('o', {Name}, {Big})`, []int{2, 3}},
	{`FIND('x', {Name}, FIND('x', {Name})) = 0`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`FIND('', {Name}) = 1`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`FIND({Status}, 'Todo Done') = 6`, []int{1, 3, 5}},
	{`FIND('"', {Name}) = 6`, []int{6}},
	{`FIND('x', {Name}, '2') = 7`, []int{3}},

	// Dates.
	{`{Due} = '2024-06-01'`, []int{5}},
	{`{Due} = '2024-06-01T00:00:00Z'`, []int{5}},
	{`{Due} = '2024-06-01 02:00:00+02:00'`, []int{5}},
	{`IS_AFTER({Start}, '2024-02-01T00:00:00Z')`, []int{2, 5}},
	{`IS_AFTER({Start}, BLANK())`, nil},
	{`IS_BEFORE({Start}, {End})`, []int{1, 2, 3}},
	{`{Start} < {End}`, []int{1, 2, 3}},
	{`DATETIME_DIFF({End}, {Start}) > 0`, []int{1, 2, 3}},
	{`DATETIME_DIFF({End}, {Start}, 'hours') = 23`, []int{2}},
	{`DATETIME_DIFF({End}, {Start}, 'M') = 1`, []int{3}},
	{`DATETIME_DIFF({End}, {Start}, 'years') = -1`, []int{5}},
	{`DATETIME_DIFF({End}, {Start}, 'minutes') = 5040`, []int{1}},
	{`DATETIME_DIFF({End}, {Start}, 'ms') = 302400000`, []int{1}},
	{`DATETIME_DIFF({End}, {Start}, 'w') = 0`, []int{1, 2}},
	{`DATETIME_DIFF({End}, {Start}, 'Q') = -4`, []int{5}},
	{`DATETIME_DIFF('2024-06-10', {Due}, 'd') = 9`, []int{5}},
	{`DATETIME_DIFF({Due}, '2024-06-10', 'days') = -9`, []int{5}},
	{`DATETIME_DIFF({Start}, {Due}, 'days') = 0`, []int{5}},
	{`DATETIME_DIFF({Start}, {Due}, 'days') = BLANK()`, []int{5}},
	{`TODAY() > '2020-01-01'`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`NOW() >= TODAY()`, []int{1, 2, 3, 4, 5, 6, 7}},
	{`IS_BEFORE(TODAY(), '2020-01-01')`, nil},
	{`DATETIME_DIFF(NOW(), TODAY(), 'days') = 0`, []int{1, 2, 3, 4, 5, 6, 7}},
}

func TestConditionsInPostgres(t *testing.T) {
	db := testDB(t)
	for _, tt := range conditionTests {
		got, err := where(db, tt.src)
		if err != nil {
			t.Errorf("%s: %v", tt.src, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.ids) && (len(got) > 0 || len(tt.ids) > 0) {
			t.Errorf("%s: rows %v, want %v", tt.src, got, tt.ids)
		}
	}
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM t`).Scan(&n); err != nil || n != len(testRows) {
		t.Errorf("table t: %d rows, %v", n, err)
	}
}

func TestValuesInPostgres(t *testing.T) {
	db := testDB(t)
	tests := []struct {
		src  string
		id   int
		typ  Type
		want any // the value as text, or nil for NULL
	}{
		{`{Count} & ' items'`, 1, Text, "5 items"},
		{`1 / 3`, 1, Number, "0.33333333333333333333"},
		{`{Price} * 2`, 1, Number, "19.98"},
		{`{Count} / 0`, 1, Number, nil},
		{`{Count} / {Price}`, 2, Number, nil},
		{`{Count}`, 4, Number, nil},
		{`{Count} + 0`, 4, Number, "0"},
		{`-{Count}`, 1, Number, "-5"},
		{`0.1 + 0.2`, 1, Number, "0.3"},
		{`DATETIME_DIFF({End}, {Start}, 'days')`, 1, Number, "3"},
		{`DATETIME_DIFF({End}, {Start}, 'days')`, 5, Number, "-366"},
		{`DATETIME_DIFF({End}, {Start})`, 2, Number, "82800"},
		{`DATETIME_DIFF({End}, {Due})`, 3, Number, nil},
		{`IF({Count} > 1, 'many', 'few')`, 1, Text, "many"},
		{`IF({Count} > 1, 'many', 'few')`, 2, Text, "few"},
		{`IF({Done}, 'yes')`, 2, Text, nil},
		{`IF({Done}, {Count}, 'none')`, 1, Text, "5"},
		{`BLANK()`, 1, Blank, nil},
		{`FIND('c', {Name})`, 1, Number, "4"},
		{`FIND('c', {Name})`, 4, Number, "0"},
		{`SEARCH('z', {Name})`, 1, Number, nil},
		{`SEARCH('i', {Name}, 2)`, 1, Number, "3"},
		{`SEARCH('i', {Name}, 3)`, 1, Number, nil},
		{`{Due} & ''`, 1, Text, "2024-05-01T00:00:00.000Z"},
		{`{Due}`, 1, Time, "2024-05-01 12:00:00+12"},
		{`{Due}`, 4, Time, nil},
		{`LEN({Name} & {Count})`, 1, Number, "6"},
		{`TRUE() & ''`, 1, Text, "1"},
		{`{Done} & ''`, 2, Text, "0"},
		{`{Done}`, 4, Bool, nil},
		{`{Count} > 3`, 1, Bool, "true"},
		{`UPPER({Name}) & LOWER({Status})`, 1, Text, "ALICEdone"},
		{`TRIM('  a b  ')`, 1, Text, "a b"},
		{`{Name}`, 6, Text, `it's "q" \ x`},
	}
	for _, tt := range tests {
		e, env, err := compile(tt.src)
		if err != nil {
			t.Errorf("%s: %v", tt.src, err)
			continue
		}
		if e.Type != tt.typ {
			t.Errorf("%s: type %v, want %v", tt.src, e.Type, tt.typ)
		}
		var got *string
		args := append(env.args, tt.id)
		q := fmt.Sprintf("SELECT (%s)::text FROM t WHERE id = $%d", e.SQL, len(args))
		if err := db.QueryRow(context.Background(), q, args...).Scan(&got); err != nil {
			t.Errorf("%s: %v\n%s", tt.src, err, q)
			continue
		}
		if tt.want == nil && got != nil || tt.want != nil && (got == nil || *got != tt.want) {
			g := "NULL"
			if got != nil {
				g = *got
			}
			t.Errorf("%s (row %d) = %s, want %v", tt.src, tt.id, g, tt.want)
		}
	}

	// TODAY() is midnight UTC of the database's current date.
	e, env, err := compile(`TODAY()`)
	if err != nil {
		t.Fatal(err)
	}
	var today, now time.Time
	if err := db.QueryRow(context.Background(), "SELECT "+e.SQL+", now()", env.args...).Scan(&today, &now); err != nil {
		t.Fatal(err)
	}
	if y, m, d := now.UTC().Date(); !today.Equal(time.Date(y, m, d, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("TODAY() = %v at %v", today, now)
	}
}

// TestDeepFormulasInPostgres runs formulas at the nesting limit, so that
// the SQL of the deepest formulas Parse accepts still runs.
func TestDeepFormulasInPostgres(t *testing.T) {
	db := testDB(t)
	nest := func(open, leaf, close string) func(k int) string {
		return func(k int) string { return strings.Repeat(open, k) + leaf + strings.Repeat(close, k) }
	}
	chain := func(first, next string) func(k int) string {
		return func(k int) string { return first + strings.Repeat(next, k) }
	}
	for _, build := range []func(int) string{
		nest("IF({Done}, ", "{Count}", ", 1)"),
		nest("FIND('a', {Name}, ", "{Count}", ")"),
		nest("SEARCH({Name}, ", "{Name}", ")"),
		nest("LOWER(", "{Name}", ")"),
		nest("NOT(", "{Done}", ")"),
		nest("-(", "{Count}", ")"),
		nest("({Count} * ", "{Big}", ")"),
		nest("({Count} / ", "{Tiny}", ")"),
		nest("({Name} & ", "{Due}", ")"),
		nest("({Done} = ", "{Done}", ")"),
		nest("IF(DATETIME_DIFF({Start}, IF({Done}, {End}, {Due}), 'M') > ", "{Count}", ", 1, 2)"),
		nest("DATETIME_DIFF({Start}, IF(", "{Done}", ", {End}, {Due}), 'years')"),
		nest("AND({Count}, OR(", "{Done}", "))"),
		chain("{Count}", " * {Big}"),
		chain("{Count}", " / {Tiny}"),
		chain("{Name}", " & {Count}"),
		chain("{Count}", " - {Price}"),
		func(k int) string { return "OR({Name} = 'x'" + strings.Repeat(", {Name} = 'y'", k) + ")" },
	} {
		k := MaxNodes / 2
		for ; k > 0; k-- {
			if _, err := Parse(build(k)); err == nil {
				break
			}
		}
		src := build(k)
		if k < MaxDepth/3 {
			t.Errorf("%.60s…: only %d levels parse", src, k)
		}
		if _, err := where(db, src); err != nil {
			t.Errorf("%.60s… (%d levels): %v", src, k, err)
		}
	}
}

// TestRandomFormulasInPostgres runs many generated formulas, which must
// either fail to compile or run without error on every row.
func TestRandomFormulasInPostgres(t *testing.T) {
	db := testDB(t)
	r := rand.New(rand.NewSource(1))
	n := 3000
	if testing.Short() {
		n = 300
	}
	ran := 0
	for i := 0; i < n; i++ {
		src := randomFormula(r, 2+i%4)
		ids, err := where(db, src)
		var fe *Error
		switch {
		case err == nil:
			ran++
		case asError(err, &fe):
		default:
			t.Errorf("%s: %v", src, err)
		}
		_ = ids
		e, env, err := compile(src)
		if err != nil {
			continue
		}
		var s *string
		if err := db.QueryRow(context.Background(), "SELECT ("+e.SQL+")::text FROM t ORDER BY id LIMIT 1", env.args...).Scan(&s); err != nil {
			t.Errorf("%s: %v\n%s", src, err, e.SQL)
		}
	}
	if ran < n/4 {
		t.Errorf("only %d of %d formulas compiled", ran, n)
	}
}

// randomFormula is a random formula of the test fields, nested at most
// depth deep.
func randomFormula(r *rand.Rand, depth int) string {
	leaves := []string{
		"{Name}", "{Status}", "{Count}", "{Price}", "{Big}", "{Tiny}", "{Done}", "{Due}", "{Start}", "{End}",
		"0", "1", "-1", "2.5", "1e308", "5e-324", "1e-300", "''", "'x'", "'Done'", "'2024-06-01'", "'3'", "' 7 '",
		"TRUE", "FALSE", "BLANK()", "TODAY()", "NOW()", "'days'", "'M'",
	}
	if depth == 0 || r.Intn(4) == 0 {
		return leaves[r.Intn(len(leaves))]
	}
	sub := func() string { return randomFormula(r, depth-1) }
	ops := []string{"=", "!=", "<", "<=", ">", ">=", "&", "+", "-", "*", "/"}
	switch r.Intn(8) {
	case 0, 1, 2:
		return "(" + sub() + " " + ops[r.Intn(len(ops))] + " " + sub() + ")"
	case 3:
		return "-" + sub()
	}
	names := []string{"AND", "OR", "NOT", "IF", "FIND", "SEARCH", "LEN", "LOWER", "UPPER", "TRIM", "IS_BEFORE", "IS_AFTER", "DATETIME_DIFF"}
	name := names[r.Intn(len(names))]
	a, ok := functions[name]
	if !ok {
		panic(name)
	}
	k := a.min + r.Intn(2)
	if a.max >= 0 && k > a.max {
		k = a.max
	}
	args := make([]string, k)
	for i := range args {
		args[i] = sub()
	}
	if name == "DATETIME_DIFF" && k == 3 && r.Intn(4) > 0 {
		units := []string{"'ms'", "'s'", "'m'", "'h'", "'days'", "'w'", "'M'", "'Q'", "'years'"}
		args[2] = units[r.Intn(len(units))]
	}
	return name + "(" + strings.Join(args, ", ") + ")"
}

func asError(err error, fe **Error) bool {
	e, ok := err.(*Error)
	*fe = e
	return ok
}
