#!/usr/bin/env bash
# The grid read benchmark: the 100-row read of a 2,000-row, 8-field table
# through Appdor's whole HTTP stack and through two bare net/http + pgx
# references (no authentication, no RLS, no middleware, no decoding in Go):
# `bare` runs SELECT json_agg(cells) …, `bare-rows` the rows' cells joined as
# they come. At 1 and 16 concurrent clients; prints p50, p99 and successful
# requests a second (and refusals) for each target.
#
# Each round runs every target once, in turn, so that the rounds alternate
# between the systems; the summary (benchstat) gives each figure's median
# over the rounds. The raw rounds stay in bench-read.txt (BENCH_OUT).
#
#   scripts/bench-read.sh            # 3 rounds against the local PostgreSQL and Redis
#   ROUNDS=5 BENCHTIME=5s scripts/bench-read.sh
#   APPDOR_BENCH_URL=http://host:8080/api/v1/tables/ID/rows?limit=100 \
#   APPDOR_BENCH_TOKEN=apd_... scripts/bench-read.sh   # a running server instead
set -euo pipefail
cd "$(dirname "$0")/.."
export APPDOR_TEST_DATABASE_URL="${APPDOR_TEST_DATABASE_URL:-postgres://root@127.0.0.1:5432/postgres?sslmode=disable}"
export APPDOR_TEST_REDIS_URL="${APPDOR_TEST_REDIS_URL:-redis://127.0.0.1:6379/0}"
out="${BENCH_OUT:-bench-read.txt}"
: >"$out"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/grid.test" ./grid
for round in $(seq "${ROUNDS:-3}"); do
  echo "round $round of ${ROUNDS:-3}" >&2
  (cd grid && "$bin/grid.test" -test.run '^$' -test.bench 'BenchmarkRead100' \
    -test.benchtime "${BENCHTIME:-2s}" -test.count 1) | tee -a "$out"
done
echo >&2
echo "medians of ${ROUNDS:-3} rounds (benchstat):" >&2
go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da "$out"
