package kafkasasl

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dedupio/dedup/internal/testsupport/mskiamtest"
)

// docs/security.md and Config.Plaintext say an AWS_MSK_IAM signature is a
// bearer credential "for its five minutes": the payload's x-amz-expires.
// franz-go v1.22.3 signs for 900 s (X-Amz-Expires, "as in the Java
// source"): a payload seen on the way is a login for fifteen minutes.
func TestAnAWSMSKIAMSignatureIsABearerCredentialForFiveMinutesAtMost(t *testing.T) {
	noAWSEnv(t)
	t.Setenv("AWS_ACCESS_KEY_ID", keyID1)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret1)
	m, err := Config{Mechanism: AWSMSKIAM}.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, msg, err := m.Authenticate(context.Background(), mskBroker)
	if err != nil {
		t.Fatal(err)
	}
	l, err := mskiamtest.Verify(msg, mskHost, keyMap{keyID1: secret1}.secret, time.Now())
	if err != nil {
		t.Fatalf("the broker would refuse %s: %v", msg, err)
	}
	exp, err := strconv.Atoi(l.Fields["x-amz-expires"])
	if err != nil || exp > 300 {
		t.Errorf("x-amz-expires %q: the signature is a bearer credential for %d s, want at most 300 (five minutes, as docs/security.md says)",
			l.Fields["x-amz-expires"], exp)
	}
}
