# Appdor's build and test entry points. `make test` is the one test command:
# the Go tests (race detector on the concurrent packages) against the local
# PostgreSQL and Redis, the browser grid's unit and browser tests, then the
# storm harness with every gate deciding (`make test-fairness` alone): it
# fails when a realm's load becomes another realm's latency past its bound,
# when the fairness controller is off the request path, or when the harness
# cannot tell. `make test-wiring` lets only the gates that do not depend on a
# quiet machine decide and reports the latency bounds, for a machine too busy
# to hold them.

APPDOR_TEST_DATABASE_URL ?= postgres://127.0.0.1:5432/postgres?sslmode=disable
APPDOR_TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
export APPDOR_TEST_DATABASE_URL APPDOR_TEST_REDIS_URL

RACE_PACKAGES := $(foreach d,limiter fairness server automations live,$(if $(wildcard $(d)/*.go),./$(d)/...))

.PHONY: build test test-go test-fairness vet

build:
	go build -o appdor ./cmd/appdor

vet:
	go vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

test-go: vet
	go test -count=1 ./...
	go test -count=1 -race $(RACE_PACKAGES)

test: test-go test-web test-fairness

# The storm harness: builds and runs the real binary on a database of its
# own, and fails when a realm's storm becomes another realm's latency.
test-fairness:
	npm run test:fairness

# The storm harness, deciding on wiring only (see -gate in test/fairness).
.PHONY: test-wiring
test-wiring:
	npm run test:fairness -- -gate wiring

# The browser grid: TypeScript's check, Vitest on its data layer, a check that the committed
# web/dist matches web/src, then the browser tests (Debian's chromium; the
# runner builds the real binary and gives it a database of its own), and
# Airtable's own npm client against the Airtable-compatible API.
.PHONY: test-web
test-web:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }
	npm ci --no-audit --no-fund
	npm run typecheck:web
	npm run test:web
	npm run check:dist
	npm run test:e2e
	npm run test:clients
