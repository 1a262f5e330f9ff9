package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/ledger/pooler"
	"github.com/dedupio/dedup/sink/starter"
)

// While it starts, dedup asks one question of every error met reaching a
// dependency: does waiting heal it? A dependency that is down, starting,
// failing over, overloaded or unreachable comes back by itself: dedup
// waits for it (and says so on /readyz and dedup_dependency_up) instead of
// exiting into a crash loop whose back-off outlasts the outage. A refusal
// that only a person can lift (credentials refused, a certificate not
// trusted, a namespace or database that does not exist, a missing
// permission) does not: dedup stops with an error naming the setting to
// fix, since waiting would only hide it behind a replica that is "not
// ready" forever. The functions below return that error, or nil to wait.
// The runbook's "Start-up: what waits and what exits" lists the cases.

// refusedPostgres classifies an error of reaching PostgreSQL or migrating
// the ledger. The transient/permanent rule is the ledger's
// (ledger.Transient); this adds the TLS refusals (which reach pgx as dial
// errors) and names the setting.
func refusedPostgres(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case tlsRefused(err):
		return fmt.Errorf("postgres.url: the TLS handshake with PostgreSQL failed (check sslmode, sslrootcert and the server's certificate): %w", err)
	case errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000"):
		return fmt.Errorf("postgres.url: PostgreSQL refused the user or password (SQLSTATE %s; fix the credentials in postgres.url or DATABASE_URL): %w", pgErr.Code, err)
	case errors.As(err, &pgErr) && pgErr.Code == "3D000":
		return fmt.Errorf("postgres.url: the database does not exist (SQLSTATE 3D000; create it or fix the name): %w", err)
	case errors.Is(err, ledger.ErrMayNotMigrate), errors.Is(err, ledger.ErrMigrationsNeedSession):
		return err // it names the setting and `dedup migrate`
	case errors.Is(pooler.Explain(err, pooler.None), pooler.ErrTransactionPooler):
		// A transaction pooler postgres.pooler does not name (26000,
		// 42P05); under transaction no statement is named, so this is
		// never met there.
		return pooler.Explain(err, pooler.None)
	case errors.As(err, &pgErr) && pgErr.Code == "08P01" && strings.Contains(pgErr.Message, "unsupported startup parameter"):
		// PgBouncer refuses a session parameter of the URL at login: it
		// would refuse it on every retry.
		return fmt.Errorf("postgres.url: the pooler refused a session parameter of the URL (%s): remove it and set it on the role instead (ALTER ROLE … SET): %w", pgErr.Message, err)
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return fmt.Errorf("postgres.url: the user lacks a privilege dedup needs (SQLSTATE 42501; grant it): %w", err)
	case ledger.Transient(err):
		return nil
	}
	return fmt.Errorf("postgres: an error waiting does not fix (fix it and restart): %w", err)
}

// refusedTemporal classifies an error of dialing Temporal or describing
// cfg's namespace. The transient/permanent rule is the starter's
// (starter.IsPermanent: Unavailable, timeouts, throttling, a namespace
// failing over, and what a proxy or ingress in front of Temporal answers,
// an HTTP 404 or a NotFound without Temporal's details, wait); this adds
// the TLS refusals (which gRPC reports as Unavailable) and names the
// setting.
func refusedTemporal(cfg config.Config) func(error) error {
	at := fmt.Sprintf("temporal.host_port %s", cfg.Temporal.HostPort)
	ns := fmt.Sprintf("temporal.namespace %q", cfg.Temporal.Namespace)
	return func(err error) error {
		var notFound *serviceerror.NamespaceNotFound
		switch {
		case err == nil:
			return nil
		case tlsRefused(err):
			return fmt.Errorf("%s: the TLS handshake with Temporal failed (check the TLS settings and the server's certificate): %w", at, err)
		case !starter.IsPermanent(err) && !credentialsRefused(err):
			// Refused credentials are transient for a running router (an
			// expired key stalls it rather than dead-lettering the stream),
			// but at start-up nothing has worked yet: they end it.
			return nil
		case errors.As(err, &notFound):
			return fmt.Errorf("%s: no such namespace at %s (register it or fix the name): %w", ns, cfg.Temporal.HostPort, err)
		}
		switch serviceerror.ToStatus(err).Code() {
		case codes.Unauthenticated:
			return fmt.Errorf("%s: Temporal refused the client's credentials (check the API key or client certificate): %w", at, err)
		case codes.PermissionDenied:
			return fmt.Errorf("%s: permission denied (the credentials lack a permission on the namespace): %w", ns, err)
		case codes.NotFound:
			return fmt.Errorf("%s: not found at %s: %w", ns, cfg.Temporal.HostPort, err)
		}
		return fmt.Errorf("%s, %s: Temporal refused for good (fix it and restart): %w", at, ns, err)
	}
}

// refusedKafka classifies an error of reaching the brokers: every broker
// error waits (brokers restart, elect leaders, move partitions) except the
// refusals below. This is the hook for the connection settings: SASL and
// TLS refusals end here.
func refusedKafka(err error) error {
	switch {
	case err == nil:
		return nil
	case tlsRefused(err):
		return fmt.Errorf("kafka.brokers: the TLS handshake with the brokers failed (check the TLS settings and the brokers' certificates): %w", err)
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return fmt.Errorf("kafka.brokers: the brokers refused the SASL authentication (check the mechanism, user and password): %w", err)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return fmt.Errorf("kafka.topics: not authorized (grant the user Describe and Read on the topics): %w", err)
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return fmt.Errorf("kafka.group: not authorized (grant the user Read on the consumer group): %w", err)
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fmt.Errorf("kafka.brokers: not authorized on the cluster: %w", err)
	}
	return nil
}

// tlsRefused reports whether err is a TLS handshake that failed for a
// reason waiting does not heal: a certificate not trusted, expired or for
// another host, a client certificate the server refused, TLS spoken to a
// plaintext server. gRPC keeps only the text of such errors, hence the
// strings.
func tlsRefused(err error) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		alert     tls.AlertError
	)
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
		return true
	case errors.As(err, &alert):
		switch alert {
		case 40, 42, 43, 44, 45, 46, 48, 49, 70, 116: // handshake_failure, bad/unsupported/revoked/expired/unknown certificate, unknown_ca, access_denied, protocol_version, certificate_required
			return true
		}
	}
	msg := err.Error()
	for _, s := range []string{"x509: ", "tls: bad certificate", "tls: unknown certificate authority", "tls: certificate required",
		"tls: handshake failure", "first record does not look like a TLS handshake", "server refused TLS connection"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// credentialsRefused: Temporal refused who dedup is, or what it may do.
func credentialsRefused(err error) bool {
	switch serviceerror.ToStatus(err).Code() {
	case codes.Unauthenticated, codes.PermissionDenied:
		return true
	}
	return false
}
