package grid

import (
	"crypto/md5"
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// A sorted or filtered read needs the table's fields to build its SQL. To
// keep such a read to one round trip, the Handler remembers each table's
// fields and the read's own statement returns the fields' current
// signature: when it differs from the remembered one, the page was built on
// stale fields, is thrown away, and the read is rebuilt from fresh ones. The
// cache is an optimization only; the database has the last word, under RLS,
// in the same statement.

// fieldsSigSQL is the signature of table t's fields as the database sees it.
// It covers what reads depend on: ids, types and names.
const fieldsSigSQL = `(SELECT md5(coalesce(string_agg(f.id::text || ':' || f.type || ':' || f.name, '|' ORDER BY f.id), ''))
  FROM fields f WHERE f.realm_id = t.realm_id AND f.table_id = t.id)`

// fieldsSig computes fieldsSigSQL's value in Go.
func fieldsSig(t *Table) string {
	parts := make([]string, len(t.Fields))
	for i, f := range t.Fields {
		parts[i] = f.ID.String() + ":" + string(f.Type) + ":" + f.Name
	}
	slices.Sort(parts) // ids lead, fixed-length hex: the database's uuid order
	sum := md5.Sum([]byte(strings.Join(parts, "|")))
	return hex.EncodeToString(sum[:])
}

// maxCachedTables bounds the cache; past it the cache starts over.
const maxCachedTables = 10_000

type schemaKey struct{ realm, table uuid.UUID }

type cachedTable struct {
	table *Table
	sig   string
}

// schemaCache remembers tables' fields per realm and table. Entries are
// read-only once stored.
type schemaCache struct {
	mu sync.Mutex
	m  map[schemaKey]cachedTable
}

func (c *schemaCache) get(realm, table uuid.UUID) (cachedTable, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[schemaKey{realm, table}]
	return e, ok
}

func (c *schemaCache) put(realm uuid.UUID, t *Table) cachedTable {
	e := cachedTable{table: t, sig: fieldsSig(t)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedTables {
		c.m = make(map[schemaKey]cachedTable)
	}
	c.m[schemaKey{realm, t.ID}] = e
	return e
}

func (c *schemaCache) drop(realm, table uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, schemaKey{realm, table})
}
