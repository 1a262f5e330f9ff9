package decide

import (
	"fmt"
	"slices"

	"github.com/dedupio/dedup/processor/eventid"
	"github.com/dedupio/dedup/processor/tenantsig"
)

// Config is what a Decider needs of a router's configuration: the event
// ID rules, the routes, the value limit, what happens to an event no
// route matches, and the tenant keyring. processor.Config carries these
// fields under the config file's names (kafka.max_value_bytes,
// kafka.no_route, kafka.tenant_keys_file, the event_id and routes
// sections) and validates them; its Decide method is this narrower view.
type Config struct {
	// EventID is the event ID rules (the config file's event_id section).
	EventID eventid.Config
	// Routes is the route table (the routes section); NewDecider
	// validates a copy (Routes.Validate fills the routes' defaults).
	Routes Routes
	// MaxValueBytes: a larger record is dead-lettered before any claim
	// (ReasonOversized); 0 is the routers' default, DefaultMaxValueBytes.
	MaxValueBytes int
	// NoRoute is what happens to an event no route matches: "skip" (also
	// when empty, the routers' default) or "dead_letter" (ReasonNoRoute).
	NoRoute string
	// TenantKeysFile is the tenant keyring's file (processor/tenantsig),
	// read by NewDecider and again when it changes; empty: no record
	// speaks for a tenant.
	TenantKeysFile string
	// TenantKeys is the keyring itself, for callers that hold it already
	// (the producer client); when set, TenantKeysFile is not read.
	TenantKeys *tenantsig.Keyring
	// Values reads values in a Schema Registry's wire format as their
	// logical JSON (processor/srdecode, built from kafka.schema_registry
	// by processor.NewDecider); nil: every value is read as written.
	Values ValueReader
}

// DefaultMaxValueBytes is the routers' kafka.max_value_bytes when the
// config file leaves it out.
const DefaultMaxValueBytes = 1 << 20

// fill validates c as NewDecider takes it: the routers' defaults for the
// fields left zero, a validated copy of the routes.
func (c *Config) fill() error {
	switch {
	case c.MaxValueBytes < 0:
		return fmt.Errorf("decide.Config.MaxValueBytes: %d, want > 0 (0: %d)", c.MaxValueBytes, DefaultMaxValueBytes)
	case c.MaxValueBytes == 0:
		c.MaxValueBytes = DefaultMaxValueBytes
	}
	switch c.NoRoute {
	case "":
		c.NoRoute = "skip"
	case "skip", "dead_letter":
	default:
		return fmt.Errorf("decide.Config.NoRoute: %q, want skip or dead_letter", c.NoRoute)
	}
	c.Routes = slices.Clone(c.Routes)
	if err := c.Routes.Validate(); err != nil {
		return fmt.Errorf("decide.Config.Routes: %w", err)
	}
	return nil
}
