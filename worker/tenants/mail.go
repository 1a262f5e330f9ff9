package tenants

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/dedupio/dedup/connect/clienttls"
	"github.com/dedupio/dedup/connect/secretfile"
	"github.com/dedupio/dedup/worker"
)

// Mailer sends over SMTP as SMTPConfig says: one session per message.
type Mailer struct {
	cfg      SMTPConfig
	tls      *clienttls.Files // nil to a loopback host
	password *secretfile.File // nil without a username
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewMailer checks c (prefix names it in errors, e.g.
// worker.tenants.smtp) and reads its files once, so that a missing CA or
// password file is a start-up error.
func NewMailer(c SMTPConfig, prefix string) (*Mailer, error) {
	if err := c.Validate(prefix); err != nil {
		return nil, err
	}
	m := &Mailer{cfg: c, dial: (&net.Dialer{}).DialContext}
	if !loopback(c.Host) {
		t := c.TLS
		t.Enabled = true
		f, err := clienttls.Load(t, prefix+".tls")
		if err != nil {
			return nil, err
		}
		m.tls = f
	}
	if c.Username != "" {
		f, err := secretfile.NewFile(prefix+".password_file", c.PasswordFile)
		if err != nil {
			return nil, err
		}
		m.password = f
	}
	return m, nil
}

// From is the sender's address.
func (m *Mailer) From() string { return m.cfg.From }

// Send delivers msg (headers and body, CRLF line ends) to one recipient
// within ctx's deadline. A refusal of the sender, the recipient or the
// message for good (a 5xx answer to MAIL, RCPT or DATA) is
// worker.Permanent; everything else (no connection, no TLS, a failed
// login, 4xx) is retryable: a configuration fixed meanwhile lets a retry
// or a re-run send.
func (m *Mailer) Send(ctx context.Context, to, msg string) error {
	addr := net.JoinHostPort(m.cfg.Host, strconv.Itoa(m.cfg.Port))
	conn, err := m.dial(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
	}
	var c *smtp.Client
	switch {
	case m.tls == nil: // loopback: never leaves the machine
		c = smtp.NewClient(conn)
	case m.cfg.Port == 465: // TLS from the first byte
		tc := tls.Client(conn, m.tls.ClientConfig(m.cfg.Host))
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return fmt.Errorf("TLS with %s: %w", addr, err)
		}
		c = smtp.NewClient(tc)
	default: // STARTTLS, or nothing is sent
		c, err = smtp.NewClientStartTLS(conn, m.tls.ClientConfig(m.cfg.Host))
		if err != nil {
			_ = conn.Close()
			return fmt.Errorf("STARTTLS with %s (required: %s is not loopback): %w", addr, m.cfg.Host, err)
		}
	}
	defer func() { _ = c.Close() }() // after Quit, or on a failure already returned
	if m.password != nil {
		pw, err := m.password.Get()
		if err != nil {
			return err
		}
		if err := c.Auth(sasl.NewPlainClient("", m.cfg.Username, pw)); err != nil {
			return fmt.Errorf("logging in to %s as %s: %w", addr, m.cfg.Username, err)
		}
	}
	inData := false // the message went (or began to go) to the server
	err = func() error {
		if err := c.Mail(m.cfg.From, nil); err != nil {
			return err
		}
		if err := c.Rcpt(to, nil); err != nil {
			return err
		}
		w, err := c.Data()
		if err != nil {
			return err
		}
		inData = true
		if _, err := w.Write([]byte(msg)); err != nil {
			return err
		}
		return w.Close() // the server's answer to the message
	}()
	if err != nil {
		var se *smtp.SMTPError
		switch {
		case errors.As(err, &se) && se.Code/100 == 5:
			return worker.Permanent(fmt.Errorf("sending to %s: %w", to, err))
		case !errors.As(err, &se) && inData:
			// No answer to a message the server may have taken: a re-run
			// keeps the Message-ID's key, so that a server (or reader)
			// that drops repeats can.
			return worker.Unanswered(fmt.Errorf("sending to %s: %w", to, err))
		}
		return fmt.Errorf("sending to %s: %w", to, err)
	}
	_ = c.Quit() // accepted: a failed goodbye does not unsend it
	return nil
}
