package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"github.com/testcontainers/testcontainers-go/wait"
)

var (
	containersMu sync.Mutex
	containers   []testcontainers.Container
)

// dockerAnswers reports whether a Docker engine is there to ask.
func dockerAnswers() bool {
	if os.Getenv("DOCKER_HOST") != "" {
		return true
	}
	_, err := os.Stat("/var/run/docker.sock")
	return err == nil
}

// startContainers starts whichever of PostgreSQL and Redis has no URL yet.
func startContainers(dbURL, redisURL string) (string, string, error) {
	if !dockerAnswers() {
		return "", "", fmt.Errorf("no test services: set %s (e.g. postgres://root@127.0.0.1:5432/test?sslmode=disable) "+
			"and %s (e.g. redis://127.0.0.1:6379/0), or run a Docker engine for testcontainers-go", DatabaseEnv, RedisEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	containersMu.Lock()
	defer containersMu.Unlock()
	if dbURL == "" {
		pg, err := tcpostgres.Run(ctx, "postgres:16-alpine",
			tcpostgres.WithDatabase("appdor"), tcpostgres.WithUsername("appdor"), tcpostgres.WithPassword("appdor"),
			testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").
				WithOccurrence(2).WithStartupTimeout(time.Minute)))
		if err != nil {
			return "", "", fmt.Errorf("starting PostgreSQL with testcontainers-go (or set %s): %w", DatabaseEnv, err)
		}
		containers = append(containers, pg)
		if dbURL, err = pg.ConnectionString(ctx, "sslmode=disable"); err != nil {
			return "", "", err
		}
	}
	if redisURL == "" {
		rd, err := tcredis.Run(ctx, "redis:7-alpine")
		if err != nil {
			return "", "", fmt.Errorf("starting Redis with testcontainers-go (or set %s): %w", RedisEnv, err)
		}
		containers = append(containers, rd)
		if redisURL, err = rd.ConnectionString(ctx); err != nil {
			return "", "", err
		}
	}
	return dbURL, redisURL, nil
}

func stopContainers() {
	containersMu.Lock()
	defer containersMu.Unlock()
	for _, c := range containers {
		_ = testcontainers.TerminateContainer(c)
	}
	containers = nil
}
