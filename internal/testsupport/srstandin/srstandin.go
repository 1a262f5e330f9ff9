// Package srstandin is a STAND-IN for a Confluent-compatible Schema
// Registry, for tests: no registry runs on the test machines. It is an
// in-process HTTP server implementing only the REST endpoints dedup
// uses, with the registry's answers and error codes:
//
//   - GET  /schemas/ids/{id}: {"schema", "schemaType", "references"};
//     404 with error_code 40403 for an unknown ID.
//   - GET  /subjects/{subject}/versions/{version}: the subject's version
//     ("latest" or -1 for the newest); 404 with 40401 (subject) or 40402
//     (version).
//   - POST /subjects/{subject}/versions: registers a schema, answers {"id"};
//     the same schema text under any subject keeps its ID, as a registry
//     does.
//
// It is not a registry: no compatibility checks, no contexts, no deletes.
// Down makes every request answer 503 (a registry that cannot answer),
// and RequireBasicAuth/RequireBearer make it refuse other credentials
// with 401.
package srstandin

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/sr"
)

// Registry is the stand-in. Close it when done.
type Registry struct {
	srv *httptest.Server

	down     atomic.Bool
	requests atomic.Int64

	mu       sync.Mutex
	nextID   int
	byID     map[int]sr.Schema
	idOf     map[string]int         // by schema type and text
	subjects map[string][]sr.Schema // versions, 1-based
	ids      map[string][]int       // the IDs of the subjects' versions
	user     string                 // basic auth wanted, if any
	pass     string
	bearer   string
}

// New starts a stand-in on a loopback port, over plain HTTP.
func New() *Registry {
	r := newRegistry()
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// NewTLS starts a stand-in over HTTPS, with httptest's certificate (for
// 127.0.0.1 and example.com); CertificatePEM is its CA.
func NewTLS() *Registry {
	r := newRegistry()
	r.srv = httptest.NewTLSServer(http.HandlerFunc(r.serve))
	return r
}

// CertificatePEM is the TLS stand-in's certificate, to trust as a CA.
func (r *Registry) CertificatePEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})
}

func newRegistry() *Registry {
	return &Registry{nextID: 1, byID: map[int]sr.Schema{}, idOf: map[string]int{}, subjects: map[string][]sr.Schema{}, ids: map[string][]int{}}
}

// URL is the base URL of the stand-in.
func (r *Registry) URL() string { return r.srv.URL }

// Close stops the server.
func (r *Registry) Close() { r.srv.Close() }

// Down makes the stand-in answer every request with 503 (down) or
// serve again (up).
func (r *Registry) Down(down bool) { r.down.Store(down) }

// Requests is how many requests reached the stand-in (cache tests).
func (r *Registry) Requests() int64 { return r.requests.Load() }

// RequireBasicAuth refuses requests without these credentials (401).
func (r *Registry) RequireBasicAuth(user, pass string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.user, r.pass = user, pass
}

// RequireBearer refuses requests without this bearer token (401).
func (r *Registry) RequireBearer(token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bearer = token
}

// Register registers s under subject and returns its ID and version.
func (r *Registry) Register(subject string, s sr.Schema) (id, version int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := s.Type.String() + "\x00" + s.Schema
	id, ok := r.idOf[key]
	if !ok {
		id = r.nextID
		r.nextID++
		r.idOf[key] = id
		r.byID[id] = s
	}
	for i, v := range r.ids[subject] {
		if v == id {
			return id, i + 1
		}
	}
	r.subjects[subject] = append(r.subjects[subject], s)
	r.ids[subject] = append(r.ids[subject], id)
	return id, len(r.subjects[subject])
}

type errorBody struct {
	ErrorCode int    `json:"error_code"`
	Message   string `json:"message"`
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	if r.down.Load() {
		reply(w, http.StatusServiceUnavailable, errorBody{50003, "stand-in is down"})
		return
	}
	r.mu.Lock()
	user, pass, bearer := r.user, r.pass, r.bearer
	r.mu.Unlock()
	if user != "" {
		if u, p, ok := req.BasicAuth(); !ok || u != user || p != pass {
			reply(w, http.StatusUnauthorized, errorBody{40101, "unauthorized"})
			return
		}
	}
	if bearer != "" && req.Header.Get("Authorization") != "Bearer "+bearer {
		reply(w, http.StatusUnauthorized, errorBody{40101, "unauthorized"})
		return
	}
	// Segments of the escaped path: a subject may hold a '/' (%2F).
	parts := strings.Split(strings.Trim(req.URL.EscapedPath(), "/"), "/")
	for i, p := range parts {
		if u, err := url.PathUnescape(p); err == nil {
			parts[i] = u
		}
	}
	switch {
	case req.Method == http.MethodGet && len(parts) == 3 && parts[0] == "schemas" && parts[1] == "ids":
		id, err := strconv.Atoi(parts[2])
		r.mu.Lock()
		s, ok := r.byID[id]
		r.mu.Unlock()
		if err != nil || !ok {
			reply(w, http.StatusNotFound, errorBody{40403, fmt.Sprintf("Schema %s not found", parts[2])})
			return
		}
		reply(w, http.StatusOK, s)
	case req.Method == http.MethodGet && len(parts) == 4 && parts[0] == "subjects" && parts[2] == "versions":
		r.mu.Lock()
		vs, ids := r.subjects[parts[1]], r.ids[parts[1]]
		r.mu.Unlock()
		if len(vs) == 0 {
			reply(w, http.StatusNotFound, errorBody{40401, fmt.Sprintf("Subject '%s' not found.", parts[1])})
			return
		}
		v := len(vs)
		if parts[3] != "latest" && parts[3] != "-1" {
			n, err := strconv.Atoi(parts[3])
			if err != nil || n < 1 || n > len(vs) {
				reply(w, http.StatusNotFound, errorBody{40402, "Version not found."})
				return
			}
			v = n
		}
		reply(w, http.StatusOK, sr.SubjectSchema{Subject: parts[1], Version: v, ID: ids[v-1], Schema: vs[v-1]})
	case req.Method == http.MethodPost && len(parts) == 3 && parts[0] == "subjects" && parts[2] == "versions":
		var s sr.Schema
		if err := json.NewDecoder(req.Body).Decode(&s); err != nil {
			reply(w, http.StatusUnprocessableEntity, errorBody{42201, err.Error()})
			return
		}
		id, _ := r.Register(parts[1], s)
		reply(w, http.StatusOK, map[string]int{"id": id})
	default:
		reply(w, http.StatusNotFound, errorBody{404, "not a stand-in endpoint: " + req.Method + " " + req.URL.Path})
	}
}
