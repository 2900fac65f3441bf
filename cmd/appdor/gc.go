package main

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/labstack/gommon/bytes"
	"github.com/spf13/cobra"
)

// The garbage collector's policy for `appdor serve`. On two cores a storm
// realm's reads and a quiet realm's reads share the CPU with the collector,
// so every collection is some realm's latency. GOGC=400 lets the heap grow to
// five times what is live before a cycle instead of twice, so it runs a
// quarter as many cycles: in BenchmarkReadPage200 (grid), collections per
// thousand 200-row reads went from 87 to 19 with the read path as it was,
// and from 0.7 to 0 once its allocations were cut (514 KB to 4 KB a read);
// paired storm-harness runs measured the quiet realm's p99 under a storm
// about 20% lower with GOGC=400 on both ends. The price is memory: Appdor
// keeps little alive (pools, token and table caches), so five times its live
// heap is still modest, and the soft memory limit bounds the rest: near it the collector runs as often as
// it must, whatever GOGC says, so a large live heap (a big CSV import) is
// collected before the container's hard limit kills the process.
//
// Without a container limit there is no hard edge to keep off, and a guessed
// limit would only make the collector run hot on a host with memory to
// spare, so the default limit is 90% of the cgroup's memory.max when there is
// one (the rest is headroom for what the cgroup also counts: page cache,
// socket buffers) and none otherwise. The runtime's own GOGC and GOMEMLIMIT,
// when set, win over both settings, as they do for any Go program.
var (
	sGCPercent   = setting{"gc-percent", "APPDOR_GC_PERCENT", "400", "garbage collector target: heap growth over the live heap, in percent, before a collection; off collects only at the memory limit (GOGC wins when set)"}
	sMemoryLimit = setting{"memory-limit", "APPDOR_MEMORY_LIMIT", "auto", "soft memory limit of the Go runtime, such as 1GiB or 900M; auto is 90% of the container's memory limit, or none without one; off is none (GOMEMLIMIT wins when set)"}
)

// gcSettings are the collector's settings of `appdor serve`.
var gcSettings = []setting{sGCPercent, sMemoryLimit}

// gcPolicy is the collector's configuration as serve applies it; a source
// says where each value came from, for the log.
type gcPolicy struct {
	percent      int   // -1 is off
	memoryLimit  int64 // math.MaxInt64 is none
	percentFrom  string
	limitFrom    string
	cgroupMemory int64 // 0 when there is no container limit
}

// cgroupFiles are where a container's memory limit is read from: cgroup v2,
// then v1 (whose "no limit" is a huge number).
var cgroupFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// cgroupMemoryLimit is the container's memory limit in bytes, 0 when there is
// none or it cannot be read.
func cgroupMemoryLimit() int64 {
	for _, f := range cgroupFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 { // "max", or v1's unlimited
			return 0
		}
		return n
	}
	return 0
}

// minMemoryLimit keeps a typo ("512" for 512MiB) from making the collector run
// without pause.
const minMemoryLimit = 64 << 20

// gcConfig reads and validates the collector's settings. cgroup is the
// container's memory limit (0: none); getenv reads GOGC and GOMEMLIMIT.
func gcConfig(cmd *cobra.Command, cgroup int64, getenv func(string) string) (gcPolicy, error) {
	p := gcPolicy{cgroupMemory: cgroup, percentFrom: sGCPercent.env, limitFrom: sMemoryLimit.env}
	switch v := strings.ToLower(str(cmd, sGCPercent)); v {
	case "off":
		p.percent = -1
	default:
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 || n > 10_000 {
			return p, configError(sGCPercent, "%q is not a percent from 10 to 10000, or off", str(cmd, sGCPercent))
		}
		p.percent = n
	}
	switch v := strings.ToLower(str(cmd, sMemoryLimit)); v {
	case "auto":
		p.memoryLimit = math.MaxInt64
		if cgroup > 0 {
			p.memoryLimit = cgroup / 10 * 9
		}
	case "off":
		p.memoryLimit = math.MaxInt64
	default:
		n, err := bytes.Parse(str(cmd, sMemoryLimit))
		if err != nil || n < minMemoryLimit {
			return p, configError(sMemoryLimit, "%q is not a size of at least 64MiB such as 1GiB or 900M, or auto or off", str(cmd, sMemoryLimit))
		}
		p.memoryLimit = n
	}
	// The runtime has read these already; they are left as it set them.
	if getenv("GOGC") != "" {
		p.percent, p.percentFrom = debug.SetGCPercent(-1), "GOGC"
		debug.SetGCPercent(p.percent)
	}
	if getenv("GOMEMLIMIT") != "" {
		p.memoryLimit, p.limitFrom = debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	}
	if p.percentFrom == sGCPercent.env && p.percent == -1 && p.memoryLimit == math.MaxInt64 {
		return p, configError(sGCPercent, "off needs a memory limit (--memory-limit), or the heap grows without bound")
	}
	return p, nil
}

// apply sets the policy on the runtime and logs it once.
func (p gcPolicy) apply(log *slog.Logger) {
	if p.percentFrom != "GOGC" {
		debug.SetGCPercent(p.percent)
	}
	if p.limitFrom != "GOMEMLIMIT" {
		debug.SetMemoryLimit(p.memoryLimit)
	}
	percent, limit := "off", "none"
	if p.percent >= 0 {
		percent = strconv.Itoa(p.percent)
	}
	if p.memoryLimit != math.MaxInt64 {
		limit = fmt.Sprintf("%dMiB", p.memoryLimit>>20)
	}
	log.Info("garbage collector", slog.String("gc_percent", percent), slog.String("gc_percent_from", p.percentFrom),
		slog.String("memory_limit", limit), slog.String("memory_limit_from", p.limitFrom),
		slog.Int64("container_memory_bytes", p.cgroupMemory))
}
