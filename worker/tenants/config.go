package tenants

import (
	"errors"
	"fmt"
	"net"
	"net/mail"
	"strings"

	"github.com/dedupio/dedup/connect/clienttls"
)

// Config is the tenant task types' section of the worker's config
// (worker.tenants).
type Config struct {
	// Enabled registers the five task types in `dedup worker`.
	Enabled bool       `yaml:"enabled"`
	SMTP    SMTPConfig `yaml:"smtp"`
}

// SMTPConfig is the mail server the welcome email goes through.
//
// TLS is required to any host that is not loopback: port 465 speaks TLS
// from the start (RFC 8314), any other port must offer STARTTLS, and a
// server that does not is refused before anything (the password, the
// message) is sent. The server's certificate is verified (the system's
// roots, or tls.ca_file). To a loopback host (localhost, 127.0.0.0/8, ::1:
// a local relay or mail catcher) the session stays in plaintext: it never
// leaves the machine.
type SMTPConfig struct {
	Host string `yaml:"host"`
	// Port defaults to 587 (submission with STARTTLS); 465 is TLS from
	// the first byte.
	Port int `yaml:"port"`
	// From is the sender's address (the envelope's and the From header).
	From string `yaml:"from"`
	// Username and PasswordFile authenticate (AUTH PLAIN, only over TLS
	// or to loopback); both or neither. The file holds the password (a
	// mounted Secret) and is read again when it changes.
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	// TLS verifies the server: ca_file (a private CA), server_name (when
	// the certificate does not name host). TLS is on whatever tls.enabled
	// says, unless host is loopback.
	TLS clienttls.Config `yaml:"tls"`
}

// DefaultConfig is the section's defaults: off, port 587.
func DefaultConfig() Config { return Config{SMTP: SMTPConfig{Port: 587}} }

// Validate names the first invalid field under prefix (worker.tenants).
// A section that is not enabled is not checked.
func (c Config) Validate(prefix string) error {
	if !c.Enabled {
		return nil
	}
	return c.SMTP.Validate(prefix + ".smtp")
}

// Validate names the first invalid field under prefix
// (worker.tenants.smtp).
func (s SMTPConfig) Validate(prefix string) error {
	switch {
	case s.Host == "":
		return fmt.Errorf("%s.host: empty; the welcome email needs a mail server", prefix)
	case strings.ContainsAny(s.Host, ":/ ") && net.ParseIP(s.Host) == nil:
		return fmt.Errorf("%s.host: %q, want a host name or IP without a port (the port is %s.port)", prefix, s.Host, prefix)
	case s.Port <= 0 || s.Port > 65535:
		return fmt.Errorf("%s.port: %d, want 1-65535", prefix, s.Port)
	case (s.Username == "") != (s.PasswordFile == ""):
		return fmt.Errorf("%s.username, password_file: set both or neither", prefix)
	}
	if a, err := mail.ParseAddress(s.From); err != nil || a.Name != "" {
		return fmt.Errorf("%s.from: %q, want an address such as hello@example.com", prefix, s.From)
	}
	if s.TLS.InsecureSkipVerify {
		return errors.New(prefix + ".tls.insecure_skip_verify: not for mail: the password and the tenants' addresses would go to whoever poses as the server")
	}
	return s.TLS.Validate(prefix + ".tls")
}

// loopback: localhost, or an address in 127.0.0.0/8 or ::1.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
