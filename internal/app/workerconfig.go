package app

import (
	"errors"
	"fmt"
	"os"
)

// LoadWorkerConfig is LoadConfig for `dedup worker`: the file is read and
// expanded alike (unknown keys are errors everywhere in it), but only the
// sections the worker reads are checked: worker, postgres, temporal, log
// and admin.pprof. A file written for the worker alone, with no kafka
// section and no routes, loads; one shared with `dedup run` loads too.
func LoadWorkerConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	return ParseWorkerConfig(b)
}

// ParseWorkerConfig is LoadWorkerConfig on bytes.
func ParseWorkerConfig(b []byte) (Config, error) {
	return parseConfig(b, (*Config).ValidateWorker)
}

// ValidateWorker names the first invalid field of the sections `dedup
// worker` reads.
func (c *Config) ValidateWorker() error {
	if err := c.validateShared(); err != nil {
		return err
	}
	if c.Admin.Pprof && c.Worker.AdminListen == "" {
		return errors.New("admin.pprof: needs worker.admin_listen (the worker's admin port)")
	}
	return nil
}
