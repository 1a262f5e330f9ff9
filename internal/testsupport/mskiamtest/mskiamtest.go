// Package mskiamtest is the broker's side of Amazon MSK's AWS_MSK_IAM
// SASL mechanism, for tests: it checks the JSON a client sends in its
// SASLAuthenticate request, and the SigV4 signature in it with AWS's own
// signer (aws-sdk-go-v2), so that the client's signing is checked against
// an implementation that is not its own. kfake does not speak
// AWS_MSK_IAM; Serve teaches a kfake cluster to. Test scaffolding: nothing
// shipped imports it.
//
// What MSK itself does after the signature (the IAM policy for
// kafka-cluster:Connect, the session lifetime it grants) is not modelled.
package mskiamtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fields are the ones MSK's IAM library (aws-msk-iam-auth) sends and the
// broker requires, as they appear in the JSON.
var Fields = []string{"version", "host", "user-agent", "action", "x-amz-algorithm", "x-amz-credential",
	"x-amz-date", "x-amz-signedheaders", "x-amz-expires", "x-amz-signature"}

// Login is one verified AWS_MSK_IAM payload.
type Login struct {
	Fields       map[string]string // the JSON, as sent
	AccessKey    string            // of x-amz-credential
	Region       string            // of x-amz-credential's scope
	SessionToken string            // x-amz-security-token, "" when none
}

// Verify checks payload, the client's first (only) SASL message, as a
// broker of host would: the fields, the version, the action, and the
// signature, recomputed with secret (the secret key of the access key in
// x-amz-credential). now bounds x-amz-date: within five minutes.
func Verify(payload []byte, host string, secret func(accessKey string) (string, bool), now time.Time) (Login, error) {
	var f map[string]string
	if err := json.Unmarshal(payload, &f); err != nil {
		return Login{}, fmt.Errorf("payload is not a JSON object of strings: %w", err)
	}
	for _, k := range Fields {
		if f[k] == "" {
			return Login{}, fmt.Errorf("payload has no %q", k)
		}
	}
	switch {
	case f["version"] != "2020_10_22":
		return Login{}, fmt.Errorf("version %q, want 2020_10_22", f["version"])
	case f["host"] != host:
		return Login{}, fmt.Errorf("host %q, want %q", f["host"], host)
	case f["action"] != "kafka-cluster:Connect":
		return Login{}, fmt.Errorf("action %q, want kafka-cluster:Connect", f["action"])
	case f["x-amz-algorithm"] != "AWS4-HMAC-SHA256":
		return Login{}, fmt.Errorf("x-amz-algorithm %q", f["x-amz-algorithm"])
	case f["x-amz-signedheaders"] != "host":
		return Login{}, fmt.Errorf("x-amz-signedheaders %q, want host", f["x-amz-signedheaders"])
	}
	// ACCESSKEY/20060102/region/kafka-cluster/aws4_request
	cred := strings.Split(f["x-amz-credential"], "/")
	if len(cred) != 5 || cred[3] != "kafka-cluster" || cred[4] != "aws4_request" {
		return Login{}, fmt.Errorf("x-amz-credential %q: want KEY/DATE/REGION/kafka-cluster/aws4_request", f["x-amz-credential"])
	}
	l := Login{Fields: f, AccessKey: cred[0], Region: cred[2], SessionToken: f["x-amz-security-token"]}
	at, err := time.Parse("20060102T150405Z", f["x-amz-date"])
	if err != nil || cred[1] != at.Format("20060102") {
		return Login{}, fmt.Errorf("x-amz-date %q does not match the credential's date %q", f["x-amz-date"], cred[1])
	}
	if d := now.Sub(at); d > 5*time.Minute || d < -5*time.Minute {
		return Login{}, fmt.Errorf("x-amz-date %s is %s from now", at, d)
	}
	sec, ok := secret(l.AccessKey)
	if !ok {
		return Login{}, fmt.Errorf("unknown access key %q", l.AccessKey)
	}
	want, err := Signature(l, host, sec, at)
	if err != nil {
		return Login{}, err
	}
	if f["x-amz-signature"] != want {
		return Login{}, errors.New("x-amz-signature does not verify")
	}
	return l, nil
}

// Signature is the SigV4 presigned-URL signature of
// GET https://host/?Action=kafka-cluster%3AConnect&X-Amz-Expires=... with
// accessKey's secret, as AWS's signer computes it.
func Signature(l Login, host, secret string, at time.Time) (string, error) {
	q := url.Values{"Action": {l.Fields["action"]}, "X-Amz-Expires": {l.Fields["x-amz-expires"]}}
	r, err := http.NewRequest(http.MethodGet, "https://"+host+"/?"+strings.ReplaceAll(q.Encode(), "+", "%20"), nil)
	if err != nil {
		return "", err
	}
	creds := aws.Credentials{AccessKeyID: l.AccessKey, SecretAccessKey: secret, SessionToken: l.SessionToken}
	const emptyBody = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), creds, r, emptyBody, "kafka-cluster", l.Region, at)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(signed)
	if err != nil {
		return "", err
	}
	return u.Query().Get("X-Amz-Signature"), nil
}

// Broker is a kfake cluster taught AWS_MSK_IAM: it offers the mechanism
// at the SASL handshake and answers each SASLAuthenticate by Verify.
// The cluster must not have kfake.EnableSASL (it would refuse requests
// after a login it did not see).
type Broker struct {
	mu      sync.Mutex
	secrets map[string]string // access key → secret key
	logins  []Login
	refused []error
}

// Serve makes c an AWS_MSK_IAM broker that knows the given access keys
// (access key → secret key).
func Serve(c *kfake.Cluster, secrets map[string]string) *Broker {
	b := &Broker{secrets: secrets}
	c.ControlKey(int16(kmsg.SASLHandshake), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.SASLHandshakeRequest)
		resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.SupportedMechanisms = []string{"AWS_MSK_IAM"}
		if r.Mechanism != "AWS_MSK_IAM" {
			resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		}
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.SASLAuthenticateRequest)
		resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		// The broker's host, as the client dialled it: kfake listens on
		// 127.0.0.1.
		l, err := Verify(r.SASLAuthBytes, "127.0.0.1", b.secret, time.Now())
		b.mu.Lock()
		defer b.mu.Unlock()
		if err != nil {
			b.refused = append(b.refused, err)
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			msg := "Access denied"
			resp.ErrorMessage = &msg
			return resp, nil, true
		}
		b.logins = append(b.logins, l)
		// MSK answers with a JSON of its own; the client wants it
		// non-empty.
		resp.SASLAuthBytes = []byte(`{"version":"2020_10_22","request-id":"test"}`)
		resp.SessionLifetimeMillis = int64(time.Hour / time.Millisecond)
		return resp, nil, true
	})
	return b
}

func (b *Broker) secret(key string) (string, bool) {
	s, ok := b.secrets[key]
	return s, ok
}

// Logins are the logins the broker accepted, in order.
func (b *Broker) Logins() []Login {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Login(nil), b.logins...)
}

// Refused are the reasons of the logins the broker refused, in order.
func (b *Broker) Refused() []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]error(nil), b.refused...)
}
