package schemaregistry

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/dedupio/dedup/connect/dialguard"
)

// checkRedirect is the client's redirect policy. net/http sends the
// Authorization header again on a redirect to the same host whatever the
// scheme, so a registry (or its load balancer) redirecting https to http
// would get the credential in the clear: with a credential, a redirect to
// plain http off this machine is refused, unless allow_insecure.
func checkRedirect(c Config, prefix string) func(*http.Request, []*http.Request) error {
	credential := c.BasicAuth.Username != "" || c.BearerTokenFile != ""
	return func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		if credential && !c.AllowInsecure && req.URL.Scheme != "https" && !dialguard.LoopbackHost(req.URL.Hostname()) {
			return fmt.Errorf("%s: refusing a redirect to %s: a credential goes to a host off this machine only over https (or set %s.allow_insecure)",
				prefix, req.URL.Redacted(), prefix)
		}
		return nil
	}
}
