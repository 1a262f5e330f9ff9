// Package promtext reads a running process's /metrics (the Prometheus text
// format) for tests and the benchmark.
package promtext

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

var client = http.Client{Timeout: 4 * time.Second}

// Sum is the sum of metric name's samples at http://addr/metrics, only
// those carrying label="value" when label is not empty; -1 when the
// endpoint does not answer.
func Sum(addr, name, label, value string) float64 {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer func() { _ = resp.Body.Close() }()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		if label != "" && !strings.Contains(line, fmt.Sprintf("%s=%q", label, value)) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			total += v
		}
	}
	return total
}
