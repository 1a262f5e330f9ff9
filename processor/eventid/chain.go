package eventid

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The ID chain: the rules that give an event its ID, tried in
// Config.Chain's order, and the checks an ID taken from a record passes.

// Rule names a way of obtaining an event ID. The value is stored in the
// ledger as the ID's provenance.
type Rule string

const (
	// RuleHeader takes the ID from the first present header of Config.Headers
	// (ce_id in CloudEvents binary mode).
	RuleHeader Rule = "header"
	// RuleField takes the ID from the envelope: the CloudEvents "id"
	// attribute, or Config.Fields.ID of a plain JSON object.
	RuleField Rule = "field"
	// RuleContent derives the ID from the content: SHA-256 over the RFC 8785
	// canonical JSON of {data, key, source, type}. The same event produced
	// twice gets the same ID wherever it lands, whatever its key order or
	// white space; two different events that only differ in fields outside
	// that set (a timestamp in a CloudEvents attribute, say) collide, which is
	// the point.
	RuleContent Rule = "content"
	// RuleCoordinates derives the ID from where the record is:
	// "topic/partition/offset". Stable for one record, but a re-send at
	// another offset is a new event: use it only for streams whose producers
	// never re-send.
	RuleCoordinates Rule = "coordinates"
)

// apply tries one rule: the ID, where it came from (Event.IDFrom), and
// whether the rule yielded one.
func (d *Decoder) apply(rule Rule, r Record, env envelope, s *scratch) (string, string, bool, error) {
	switch rule {
	case RuleHeader:
		for _, name := range d.cfg.Headers {
			if v, ok := header(r.Headers, name); ok {
				id, err := d.checkID(string(v), "header ", name)
				return id, name, err == nil, err
			}
		}
	case RuleField:
		if env.id == nil {
			return "", "", false, nil
		}
		var s string
		switch env.id[0] {
		case '"':
			var err error
			if s, err = unquote(env.id); err != nil {
				return "", "", false, fail(ReasonInvalidID, "id field: %v", err)
			}
		case 'n': // null counts as absent
			return "", "", false, nil
		default:
			// A number is an ID too; its literal text is kept as is, so 7
			// and 7.0 are two IDs, as the producer wrote them.
			if _, err := strconv.ParseFloat(string(env.id), 64); err != nil {
				return "", "", false, fail(ReasonInvalidID, "id field is %s, not a string or number", kind(env.id))
			}
			s = string(env.id)
		}
		id, err := d.checkID(s, "id field", "")
		return id, d.idField(env), err == nil, err
	case RuleContent:
		key := r.Key
		if key == nil {
			key = []byte{} // a record without a key still has the "key" member
		}
		return contentID(s.sumAssembled(env.source, env.typ, key)), "", true, nil
	case RuleCoordinates:
		// A record replayed from the dead-letter topic carries where it was
		// first read (dedup-origin-*): it keeps that ID.
		t, okT := header(r.Headers, "dedup-origin-topic")
		p, okP := header(r.Headers, "dedup-origin-partition")
		o, okO := header(r.Headers, "dedup-origin-offset")
		if okT && okP && okO {
			if _, err := strconv.ParseInt(string(p), 10, 32); err == nil {
				if _, err := strconv.ParseInt(string(o), 10, 64); err == nil && utf8.Valid(t) {
					return fmt.Sprintf("%s/%s/%s", t, p, o), OriginHeaders, true, nil
				}
			}
		}
		return fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset), "", true, nil
	}
	return "", "", false, nil
}

// idField is the path of the ID field of env's format.
func (d *Decoder) idField(env envelope) string {
	if env.kind == EnvelopePlain {
		return d.cfg.Fields.ID
	}
	return "id"
}

// checkID checks an ID taken from a record; what+name says where it was
// found (joined only for an error: a record's header ID costs no label).
func (d *Decoder) checkID(s, what, name string) (string, error) {
	switch {
	case s == "":
		return "", fail(ReasonInvalidID, "%s%s is empty", what, name)
	case len(s) > d.cfg.MaxIDLength:
		return "", fail(ReasonInvalidID, "%s%s is %d bytes, over %d", what, name, len(s), d.cfg.MaxIDLength)
	case !utf8.ValidString(s):
		return "", fail(ReasonInvalidID, "%s%s is not UTF-8", what, name)
	case strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return "", fail(ReasonInvalidID, "%s%s has a control character", what, name)
	}
	return s, nil
}

// contentID is the content rule's ID of a hash, sha256-{hex}, built in
// one allocation.
func contentID(sum [sha256.Size]byte) string {
	const prefix = "sha256-"
	var b [len(prefix) + 2*sha256.Size]byte
	copy(b[:], prefix)
	hex.Encode(b[len(prefix):], sum[:])
	return string(b[:])
}
