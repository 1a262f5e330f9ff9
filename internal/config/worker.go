package config

import (
	"fmt"
	"os"
)

// LoadWorker is Load for `dedup worker`: the file is read and
// expanded alike (unknown keys are errors everywhere in it), but only the
// sections the worker reads are checked: worker, postgres, temporal and
// log. A file written for the worker alone, with no kafka
// section and no routes, loads; one shared with `dedup run` loads too.
func LoadWorker(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	return ParseWorker(b)
}

// ParseWorker is LoadWorker on bytes.
func ParseWorker(b []byte) (Config, error) {
	return parse(b, (*Config).ValidateWorker)
}

// ValidateWorker names the first invalid field of the sections `dedup
// worker` reads.
func (c *Config) ValidateWorker() error {
	// admin.pprof is not checked against worker.admin_listen: a file
	// shared with `dedup run` may turn pprof on for the router's port
	// while the worker runs without one.
	return c.validateShared()
}
