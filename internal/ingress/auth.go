package ingress

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/dedupio/dedup/connect/secretfile"
	"github.com/dedupio/dedup/processor/eventid"
)

// Tokens are the bearer tokens that may call the API and who each one is:
// a tenant and what it may do. They come from a YAML file, read again when
// it changes:
//
//	tokens:
//	  - tenant: acme                 # a-z, 0-9, '.', '_', '-'; scopes its keys
//	    token_sha256: 9f86d0...      # hex SHA-256 of the token (the file holds no secret),
//	    # token: "..."               # or the token itself, at least 16 bytes
//	    event_types: ["order.*"]     # required: the types it may send; * stands for any run of characters ("*": any)
//	    routes: [confirm]            # required: the only routes its events may start (["*"]: every route)
//	    read_status: true            # GET /v1/workflows/{id} of its own workflows; default false
//
// A tenant may have several tokens (rotation); a token names one tenant.
type Tokens struct {
	key string
	f   *secretfile.File

	mu      sync.Mutex
	content string
	table   map[[32]byte]*Principal
	err     error
	known   func(route string) bool // nil: any route name
	log     *slog.Logger
}

// Principal is who a request is: its tenant and what it may do. The
// anonymous principal (no tokens_file) is tenant "" and may do everything.
type Principal struct {
	Tenant     string
	eventTypes []string
	routes     map[string]bool // nil: any
	ReadStatus bool
}

// anonymous is the principal of every request when no tokens_file is set.
var anonymous = &Principal{eventTypes: []string{"*"}, ReadStatus: true}

// MayType says whether p may send events of type typ.
func (p *Principal) MayType(typ string) bool {
	for _, pat := range p.eventTypes {
		if globMatch(pat, typ) {
			return true
		}
	}
	return false
}

// globMatch matches s against pattern, where '*' stands for any run of
// characters ('/' included: event types are often URIs) and every other
// character for itself.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, part := range parts[1 : len(parts)-1] {
		i := strings.Index(s, part)
		if i < 0 {
			return false
		}
		s = s[i+len(part):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

// MayRoute says whether p's events may start workflows of route id.
func (p *Principal) MayRoute(id string) bool { return p.routes == nil || p.routes[id] }

// MinTokenBytes is the shortest bearer token LoadTokens accepts: 16 bytes
// (128 bits when random) make guessing hopeless.
const MinTokenBytes = 16

type tokensFile struct {
	Tokens []tokenEntry `yaml:"tokens"`
}

type tokenEntry struct {
	Tenant      string   `yaml:"tenant"`
	Token       string   `yaml:"token"`
	TokenSHA256 string   `yaml:"token_sha256"`
	EventTypes  []string `yaml:"event_types"`
	Routes      []string `yaml:"routes"`
	ReadStatus  bool     `yaml:"read_status"`
}

// LoadTokens reads the file once: a missing or empty file, one that is not
// the YAML above (the old one-token-a-line file included), an entry
// without a valid tenant or event_types, a token shorter than
// MinTokenBytes, or one token given twice is a start-up error naming key
// and the entry (never the token).
func LoadTokens(key, path string) (*Tokens, error) {
	f, err := secretfile.NewFile(key, path)
	if err != nil {
		return nil, err
	}
	t := &Tokens{key: fmt.Sprintf("%s (%s)", key, path), f: f}
	if _, err := t.current(); err != nil {
		return nil, err
	}
	return t, nil
}

// current is the table of the file as it is now; an unreadable or invalid
// file is an error, and then nobody may call the API (no stale token stays
// valid after an edit that broke the file).
func (t *Tokens) current() (map[[32]byte]*Principal, error) {
	v, err := t.f.Get()
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.content, t.table, t.err = "", nil, err
		return nil, err
	}
	if v != t.content || (t.table == nil && t.err == nil) {
		t.content = v
		t.table, t.err = parseTokens(t.key, []byte(v), t.known)
		if t.err != nil && t.log != nil {
			t.log.Error("the tokens file is invalid: every request gets 401 until it is fixed", "err", t.err)
		}
	}
	return t.table, t.err
}

func parseTokens(key string, b []byte, known func(string) bool) (map[[32]byte]*Principal, error) {
	var tf tokensFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&tf); errors.Is(err, io.EOF) {
		tf = tokensFile{}
	} else if err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) && !strings.Contains(string(b), "tokens:") {
			return nil, fmt.Errorf("%s: not a tokens file: want YAML `tokens: [{tenant: ..., token_sha256: ..., event_types: [...]}]` "+
				"(the one-token-a-line format is gone: every token names its tenant)", key)
		}
		// yaml's errors quote the offending value: never show it (it
		// may be a token).
		return nil, fmt.Errorf("%s: not a tokens file (YAML: tokens: [{tenant, token_sha256 or token, event_types, routes, read_status}])", key)
	}
	var more any
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: more than one YAML document (a --- line): keep every token in the first document's tokens list", key)
	}
	if len(tf.Tokens) == 0 {
		return nil, fmt.Errorf("%s: holds no token: add entries under tokens:, or leave ingress.tokens_file empty (loopback only, or ingress.allow_unauthenticated)", key)
	}
	table := make(map[[32]byte]*Principal, len(tf.Tokens))
	for i, e := range tf.Tokens {
		if eventid.ValidTenant(e.Tenant) != nil {
			// Never the value: it may be a token pasted in the wrong key.
			return nil, fmt.Errorf("%s: tokens[%d]: tenant: missing or not a tenant name (1 to %d bytes of a-z, 0-9, '.', '_', '-', "+
				"starting with a letter or digit; the value is not shown: it may be a token)", key, i, eventid.MaxTenantLength)
		}
		// Named by position only: a token pasted into tenant can be a valid
		// tenant name (lowercase hex), and an error must never show it.
		where := fmt.Sprintf("%s: tokens[%d]", key, i)
		var sum [32]byte
		switch {
		case e.Token != "" && e.TokenSHA256 != "":
			return nil, fmt.Errorf("%s: token and token_sha256: give one", where)
		case e.Token != "":
			if strings.TrimSpace(e.Token) != e.Token {
				return nil, fmt.Errorf("%s: token: it starts or ends with white space, which no Authorization header can carry", where)
			}
			if len(e.Token) < MinTokenBytes {
				return nil, fmt.Errorf("%s: token: %d bytes, want at least %d (e.g. openssl rand -hex 32)", where, len(e.Token), MinTokenBytes)
			}
			sum = sha256.Sum256([]byte(e.Token))
		case e.TokenSHA256 != "":
			h, err := hex.DecodeString(e.TokenSHA256)
			if err != nil || len(h) != 32 {
				return nil, fmt.Errorf("%s: token_sha256: want 64 hex digits (sha256sum of the token)", where)
			}
			copy(sum[:], h)
		default:
			return nil, fmt.Errorf("%s: token or token_sha256: missing", where)
		}
		if _, dup := table[sum]; dup {
			return nil, fmt.Errorf("%s: the same token as an entry before it: a token names one tenant", where)
		}
		if len(e.EventTypes) == 0 {
			return nil, fmt.Errorf(`%s: event_types: missing: list the types it may send (["*"]: any)`, where)
		}
		for j, pat := range e.EventTypes {
			if pat == "" {
				return nil, fmt.Errorf(`%s: event_types[%d]: empty (a type, or a pattern whose * stands for any run of characters; "*": any)`, where, j)
			}
		}
		// Default deny: routes absent, null (routes: with no value, a
		// template's empty rendering, a file read half written) or empty
		// is an error, never "every route"; ["*"] is every route.
		if len(e.Routes) == 0 {
			return nil, fmt.Errorf(`%s: routes: missing, null or empty: list the routes it may start (["*"]: every route)`, where)
		}
		p := &Principal{Tenant: e.Tenant, eventTypes: e.EventTypes, ReadStatus: e.ReadStatus}
		if !slices.Contains(e.Routes, "*") {
			p.routes = map[string]bool{}
			for j, r := range e.Routes {
				if known != nil && !known(r) {
					return nil, fmt.Errorf("%s: routes[%d]: no route has the ID %q", where, j, r)
				}
				p.routes[r] = true
			}
		}
		table[sum] = p
	}
	return table, nil
}

// Check makes every version of the file, this one and each change, name
// only routes known says exist (a typo would silently forbid a route), and
// logs on log a change that makes the file invalid (then nobody may call
// the API until it is fixed). It returns this version's error.
func (t *Tokens) Check(known func(route string) bool, log *slog.Logger) error {
	t.mu.Lock()
	t.known, t.log, t.content, t.table, t.err = known, log, "", nil, nil
	t.mu.Unlock()
	_, err := t.current()
	return err
}

// principal is who the Authorization header says the caller is; nil: no
// token, an unknown one, or an unreadable file. The token is hashed
// before it is looked up, so that the lookup's timing says nothing about
// the tokens.
func (t *Tokens) principal(authorization string) *Principal {
	scheme, tok, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	tok = strings.TrimSpace(tok)
	if len(tok) < MinTokenBytes {
		// Whatever the file holds (a token_sha256 of a short token):
		// a short token is guessable.
		return nil
	}
	table, err := t.current()
	if err != nil {
		return nil
	}
	return table[sha256.Sum256([]byte(tok))]
}
