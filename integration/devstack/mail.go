package devstack

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/mail"
	"sync"

	"github.com/emersion/go-smtp"
)

// Mailbox is a local mail server for the dev stack's tenant onboarding
// demo (worker.tenants' send_welcome_email). It behaves as a receiving
// mail system that drops a message whose Message-ID it already has: the
// first message of an ID is a delivery; a repeat (a send the worker could
// not know had arrived, cut short by a crash) is counted as dropped.
// Plain SMTP on 127.0.0.1: loopback, where the worker needs no TLS.
type Mailbox struct {
	srv  *smtp.Server
	addr *net.TCPAddr
	mu   sync.Mutex
	ids  map[string]int // messages per Message-ID
}

// MailCounts are what the mailbox has seen.
type MailCounts struct {
	Messages   int // every message the server accepted
	Deliveries int // distinct Message-IDs
	Dropped    int // repeats of a Message-ID already delivered
}

// StartMailbox listens on 127.0.0.1, on any free port.
func StartMailbox() (*Mailbox, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the mailbox: %w", err)
	}
	m := &Mailbox{addr: l.Addr().(*net.TCPAddr), ids: map[string]int{}}
	m.srv = smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return mailSession{m}, nil }))
	m.srv.Domain = "localhost"
	go func() { _ = m.srv.Serve(l) }()
	return m, nil
}

// Host and Port are where the worker sends (worker.tenants.smtp).
func (m *Mailbox) Host() string { return m.addr.IP.String() }

// Port is the mailbox's port.
func (m *Mailbox) Port() int { return m.addr.Port }

// Counts returns the counts so far.
func (m *Mailbox) Counts() MailCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := MailCounts{Deliveries: len(m.ids)}
	for _, n := range m.ids {
		c.Messages += n
		c.Dropped += n - 1
	}
	return c
}

// Close stops the mailbox.
func (m *Mailbox) Close() { _ = m.srv.Close() }

type mailSession struct{ m *Mailbox }

func (s mailSession) Reset()                               {}
func (s mailSession) Logout() error                        { return nil }
func (s mailSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s mailSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (s mailSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	msg, err := mail.ReadMessage(bytes.NewReader(b))
	if err != nil {
		return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "not a message: " + err.Error()}
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.m.ids[msg.Header.Get("Message-ID")]++
	return nil
}
