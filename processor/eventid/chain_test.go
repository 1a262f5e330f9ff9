package eventid

import (
	"strings"
	"testing"
)

// c1108b0 joins checkID's label ("header "+name) only for an error: the
// error texts (dead-letter reasons, decisions.golden) are exactly those of
// before, for every check and both kinds of label.
func TestAnInvalidIDsErrorNamesWhereItWasFoundAsBefore(t *testing.T) {
	d := mustDecoder(t, func(c *Config) { c.Headers = []string{"Idempotency-Key", "ce_id"} })
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		r    Record
		want string
	}{
		{rec(`{"type":"t"}`, "Idempotency-Key", ""), "header Idempotency-Key is empty"},
		{rec(`{"type":"t"}`, "Idempotency-Key", long), "header Idempotency-Key is 300 bytes, over 256"},
		{rec(`{"type":"t"}`, "Idempotency-Key", "a\xffb"), "header Idempotency-Key is not UTF-8"},
		{rec(`{"type":"t"}`, "Idempotency-Key", "a\x7fb"), "header Idempotency-Key has a control character"},
		{rec(`{}`, "ce_specversion", "1.0", "ce_id", "a\tb", "ce_type", "t"), "header ce_id has a control character"},
		{rec(`{"id":"","type":"t"}`), "id field is empty"},
		{rec(`{"id":"` + long + `","type":"t"}`), "id field is 300 bytes, over 256"},
		{rec(`{"id":"a\u0001b","type":"t"}`), "id field has a control character"},
	} {
		_, err := d.Decode(tc.r)
		if ReasonOf(err) != ReasonInvalidID || err == nil || err.Error() != "invalid_id: "+tc.want {
			t.Errorf("%q %v: %v, want invalid_id: %s", tc.r.Value, tc.r.Headers, err, tc.want)
		}
	}
}
