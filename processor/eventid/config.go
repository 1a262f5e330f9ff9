package eventid

import (
	"errors"
	"fmt"
)

// The decoder's configuration and its validation.

// Format selects how values are read.
type Format string

// The formats a decoder reads values in.
const (
	FormatAuto        Format = "auto"        // CloudEvents binary if ce_specversion/ce_type headers, structured if "specversion", else plain
	FormatCloudEvents Format = "cloudevents" // binary or structured CloudEvents only
	FormatPlain       Format = "plain"       // a JSON object read through Fields
)

// Fields are dotted paths into a plain JSON object ("meta.event_id").
type Fields struct {
	ID     string `yaml:"id"`
	Type   string `yaml:"type"`
	Source string `yaml:"source"`
	Time   string `yaml:"time"`
	// Data is the payload; empty means the whole object.
	Data string `yaml:"data"`
}

// Config is the decoder's configuration. The zero value is not valid; start
// from DefaultConfig.
type Config struct {
	Format Format `yaml:"format"`
	// Chain is tried in order; the first rule that yields an ID wins. A
	// header or field that is present but unusable (empty, too long, an
	// object) is an error, not a fall-through: silently deriving an ID for
	// an event that carried a broken one would hide a producer bug.
	Chain []Rule `yaml:"chain"`
	// Headers read by RuleHeader, first present wins.
	Headers []string `yaml:"headers"`
	// Fields of plain JSON objects.
	Fields Fields `yaml:"fields"`
	// MaxIDLength bounds IDs taken from headers or fields, in bytes; the
	// workflow ID adds the activity ID to it, and Temporal caps workflow IDs
	// at 1,000 bytes by default.
	MaxIDLength int `yaml:"max_id_length"`
}

// DefaultConfig reads CloudEvents or plain JSON, takes the ID from ce_id or
// an Idempotency-Key header, then the envelope's id field, then derives it
// from content.
func DefaultConfig() Config {
	return Config{
		Format:      FormatAuto,
		Chain:       []Rule{RuleHeader, RuleField, RuleContent},
		Headers:     []string{"ce_id", "idempotency-key"},
		Fields:      Fields{ID: "id", Type: "type", Source: "source", Time: "time"},
		MaxIDLength: 256,
	}
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	switch c.Format {
	case FormatAuto, FormatCloudEvents, FormatPlain:
	default:
		return fmt.Errorf("event_id.format: %q is not auto, cloudevents or plain", c.Format)
	}
	if len(c.Chain) == 0 {
		return errors.New("event_id.chain: empty")
	}
	seen := map[Rule]bool{}
	for i, r := range c.Chain {
		switch r {
		case RuleHeader, RuleField, RuleContent, RuleCoordinates:
		default:
			return fmt.Errorf("event_id.chain[%d]: unknown rule %q (header, field, content, coordinates)", i, r)
		}
		if seen[r] {
			return fmt.Errorf("event_id.chain[%d]: rule %q repeated", i, r)
		}
		seen[r] = true
	}
	if seen[RuleHeader] && len(c.Headers) == 0 {
		return errors.New("event_id.headers: empty while the chain has the header rule")
	}
	if c.Format != FormatCloudEvents && c.Fields.Type == "" {
		return errors.New("event_id.fields.type: empty")
	}
	if seen[RuleField] && c.Format != FormatCloudEvents && c.Fields.ID == "" {
		return errors.New("event_id.fields.id: empty while the chain has the field rule")
	}
	if c.MaxIDLength <= 0 || c.MaxIDLength > 900 {
		return fmt.Errorf("event_id.max_id_length: %d is not in 1..900", c.MaxIDLength)
	}
	return nil
}
