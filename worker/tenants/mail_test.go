package tenants

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dedupio/dedup/connect/secretfile"
	"github.com/dedupio/dedup/internal/testsupport/testpki"
	"github.com/dedupio/dedup/worker"
)

const testMsg = "From: hello@dedup.example\r\nTo: owner@acme.example\r\nSubject: hi\r\nMessage-ID: <1@dedup.invalid>\r\n\r\nhi\r\n"

// remote is a mailer whose host is not loopback (mail.example.test) and
// whose connections reach mb: what a real mail server looks like to it.
// dialled records the address it asked for.
func remote(t *testing.T, mb *mailbox, c SMTPConfig) (m *Mailer, dialled *string) {
	t.Helper()
	c.Host = "mail.example.test"
	if c.Port == 0 {
		c.Port = 587
	}
	if c.From == "" {
		c.From = "hello@dedup.example"
	}
	m, err := NewMailer(c, "worker.tenants.smtp")
	if err != nil {
		t.Fatal(err)
	}
	var asked string
	m.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		asked = addr
		return (&net.Dialer{}).DialContext(ctx, network, mb.addr)
	}
	return m, &asked
}

func secretFile(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(p, []byte(s+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func send(m *Mailer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return m.Send(ctx, "owner@acme.example", testMsg)
}

// pki is a CA, its file, and a server certificate for mail.example.test.
func pki(t *testing.T) (caFile string, server *tls.Config) {
	ca := testpki.NewCA(t, "mail CA")
	cert := ca.Server(t, "mail.example.test").TLS(t)
	return testpki.Write(t, t.TempDir(), "ca.pem", ca.CertPEM), &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// To a host that is not loopback, a server that offers no STARTTLS is
// refused before anything is sent: no login (the password stays), no
// message. The error is retryable (a server fixed meanwhile lets a retry
// send) and says why.
func TestMailerRequiresTLSOffLoopback(t *testing.T) {
	mb := newMailboxWith(t, mailboxOptions{users: map[string]string{"dedup": "s3cret"}})
	m, dialled := remote(t, mb, SMTPConfig{Username: "dedup", PasswordFile: secretFile(t, "s3cret")})
	err := send(m)
	if err == nil || !strings.Contains(err.Error(), "STARTTLS") || worker.IsPermanent(err) {
		t.Fatalf("got %v, want a retryable error about STARTTLS", err)
	}
	if *dialled != "mail.example.test:587" {
		t.Fatalf("dialled %s", *dialled)
	}
	if d, _ := mb.counts(); d != 0 || len(mb.logins) != 0 || len(mb.sessions) != 0 {
		t.Fatalf("%d deliveries, logins %v, sessions %v: want nothing sent", d, mb.logins, mb.sessions)
	}
}

// STARTTLS verified against tls.ca_file, then AUTH PLAIN with the
// password file's content (without its newline), then the message.
func TestMailerStartTLSAndLogin(t *testing.T) {
	caFile, server := pki(t)
	mb := newMailboxWith(t, mailboxOptions{tls: server, users: map[string]string{"dedup": "s3cret"}})
	c := SMTPConfig{Username: "dedup", PasswordFile: secretFile(t, "s3cret")}
	c.TLS.CAFile = caFile
	m, _ := remote(t, mb, c)
	if err := send(m); err != nil {
		t.Fatal(err)
	}
	if d, _ := mb.counts(); d != 1 || len(mb.sessions) != 1 || mb.sessions[0] != (sessionNote{tls: true, user: "dedup"}) {
		t.Fatalf("%d deliveries, sessions %+v; want one, over TLS, as dedup", d, mb.sessions)
	}
	// A rotated password file is read again.
	if err := os.WriteFile(c.PasswordFile, []byte("n3w\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(secretfile.StatInterval) // the next look at the file (secretfile.StatInterval)
	mb.mu.Lock()
	mb.users["dedup"] = "n3w"
	mb.mu.Unlock()
	if err := send(m); err != nil {
		t.Fatalf("after the password rotated: %v", err)
	}
}

// Port 465 speaks TLS from the first byte.
func TestMailerImplicitTLS(t *testing.T) {
	caFile, server := pki(t)
	mb := newMailboxWith(t, mailboxOptions{tls: server, implicit: true})
	c := SMTPConfig{Port: 465}
	c.TLS.CAFile = caFile
	m, dialled := remote(t, mb, c)
	if err := send(m); err != nil {
		t.Fatal(err)
	}
	if *dialled != "mail.example.test:465" || len(mb.sessions) != 1 || !mb.sessions[0].tls {
		t.Fatalf("dialled %s, sessions %+v; want one over TLS", *dialled, mb.sessions)
	}
}

// A server whose certificate does not verify (another CA: the system
// roots here) gets neither the password nor the message; a wrong password
// is retryable (it may be rotated meanwhile), not a refusal of the
// recipient.
func TestMailerRefusesUnverifiedServerAndBadLogin(t *testing.T) {
	_, server := pki(t)
	mb := newMailboxWith(t, mailboxOptions{tls: server, users: map[string]string{"dedup": "s3cret"}})
	m, _ := remote(t, mb, SMTPConfig{Username: "dedup", PasswordFile: secretFile(t, "s3cret")})
	if err := send(m); err == nil || len(mb.logins) != 0 || len(mb.sessions) != 0 {
		t.Fatalf("an unverified server: %v, logins %v; want refused before the login", err, mb.logins)
	}
	caFile, server := pki(t)
	mb = newMailboxWith(t, mailboxOptions{tls: server, users: map[string]string{"dedup": "s3cret"}})
	c := SMTPConfig{Username: "dedup", PasswordFile: secretFile(t, "wrong")}
	c.TLS.CAFile = caFile
	m, _ = remote(t, mb, c)
	if err := send(m); err == nil || worker.IsPermanent(err) || !strings.Contains(err.Error(), "535") {
		t.Fatalf("a wrong password: %v, want a retryable 535", err)
	}
}

// To loopback, plaintext is fine, login included: it never leaves the
// machine (a local relay, a mail catcher).
func TestMailerLoopbackPlaintext(t *testing.T) {
	mb := newMailboxWith(t, mailboxOptions{users: map[string]string{"dedup": "s3cret"}})
	c := smtpTo(mb)
	c.Host = "localhost"
	c.Username, c.PasswordFile = "dedup", secretFile(t, "s3cret")
	m, err := NewMailer(c, "worker.tenants.smtp")
	if err != nil {
		t.Fatal(err)
	}
	if err := send(m); err != nil {
		t.Fatal(err)
	}
	if len(mb.sessions) != 1 || mb.sessions[0] != (sessionNote{tls: false, user: "dedup"}) {
		t.Fatalf("sessions %+v", mb.sessions)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	ok := SMTPConfig{Host: "smtp.example.com", Port: 587, From: "hello@example.com"}
	for want, c := range map[string]SMTPConfig{
		"worker.tenants.smtp.host: empty":                    {Port: 587, From: "hello@example.com"},
		"worker.tenants.smtp.host: \"smtp.example.com:587\"": {Host: "smtp.example.com:587", Port: 587, From: "hello@example.com"},
		"worker.tenants.smtp.port: 0":                        {Host: "smtp.example.com", From: "hello@example.com"},
		"worker.tenants.smtp.username, password_file":        {Host: "smtp.example.com", Port: 587, From: "hello@example.com", Username: "u"},
		"worker.tenants.smtp.from":                           {Host: "smtp.example.com", Port: 587, From: "Hello <hello@example.com>"},
	} {
		if err := (Config{Enabled: true, SMTP: c}).Validate("worker.tenants"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	bad := ok
	bad.TLS.InsecureSkipVerify = true
	if err := (Config{Enabled: true, SMTP: bad}).Validate("worker.tenants"); err == nil || !strings.Contains(err.Error(), "insecure_skip_verify") {
		t.Errorf("insecure_skip_verify: %v", err)
	}
	if err := (Config{Enabled: true, SMTP: ok}).Validate("worker.tenants"); err != nil {
		t.Errorf("a good section: %v", err)
	}
	if err := (Config{SMTP: SMTPConfig{}}).Validate("worker.tenants"); err != nil {
		t.Errorf("a section not enabled is not checked: %v", err)
	}
	missing := ok
	missing.Username, missing.PasswordFile = "u", filepath.Join(t.TempDir(), "absent")
	if _, err := NewMailer(missing, "worker.tenants.smtp"); err == nil || !strings.Contains(err.Error(), "worker.tenants.smtp.password_file") {
		t.Errorf("a missing password file: %v", err)
	}
}
