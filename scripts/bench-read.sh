#!/usr/bin/env bash
# The grid read benchmark: the 100-row read of a 2,000-row, 8-field table
# through Appdor's whole HTTP stack and through a bare net/http + pgx handler
# running the same SELECT, at 1 and 16 concurrent clients; prints p50, p99 and
# successful requests a second (and refusals) for each.
#
#   scripts/bench-read.sh            # against the local PostgreSQL and Redis
#   BENCHTIME=5s scripts/bench-read.sh
#   APPDOR_BENCH_URL=http://host:8080/api/v1/tables/ID/rows?limit=100 \
#   APPDOR_BENCH_TOKEN=apd_... scripts/bench-read.sh   # a running server instead
set -euo pipefail
cd "$(dirname "$0")/.."
export APPDOR_TEST_DATABASE_URL="${APPDOR_TEST_DATABASE_URL:-postgres://root@127.0.0.1:5432/postgres?sslmode=disable}"
export APPDOR_TEST_REDIS_URL="${APPDOR_TEST_REDIS_URL:-redis://127.0.0.1:6379/0}"
exec go test ./grid -run '^$' -bench 'BenchmarkRead100' -benchtime "${BENCHTIME:-2s}" -count "${COUNT:-1}"
