// Package test holds Appdor's black-box tests: the API and the schema seen
// from outside, against the real PostgreSQL and Redis.
package test

import (
	"testing"

	"github.com/appdor/appdor/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
