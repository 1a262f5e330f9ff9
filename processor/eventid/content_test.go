package eventid

import "testing"

// A Decode's scratch goes back to a pool: it must keep nothing of the
// record it read, not even the members a failed fast scan wrote past the
// members it returned (release clears only up to their length).
func TestAPooledScratchKeepsNoMemberOfTheRecordItRead(t *testing.T) {
	for name, value := range map[string]string{
		"one pass":                 `{"type":"x","a":1,"b":[1,2]}`,
		"one pass fails, 2nd scan": `{"type":"x","a":1,"b":2,"c\u0041":3}`,
		"both fast scans fail":     `{"type":"x","a":1,"b":2,"c\"d":3}`,
	} {
		s := &scratch{ms: make(members, 0, 8)}
		if _, err := scanRecordObject([]byte(value), s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s.release()
		for i, m := range s.ms[:cap(s.ms)] {
			if m.key != nil || m.val != nil || m.canon != nil {
				t.Errorf("%s: after release, member %d still points into the record: %q", name, i, m.key)
			}
		}
	}
}
