package dial

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/dedupio/dedup/internal/config"
	"github.com/dedupio/dedup/internal/testsupport/mskiamtest"
	"github.com/dedupio/dedup/internal/testsupport/testpki"
)

// kafka.sasl with AWS_MSK_IAM, as the config file says it: the keys
// parse (unknown keys are an error, so this is where a misspelt one would
// show), and the rule that no credential crosses the network in
// plaintext covers it: to an MSK broker it needs kafka.tls (MSK's IAM
// listener is TLS-only anyway), unless kafka.allow_insecure; loopback
// brokers are this machine.
func TestMSKIAMConfig(t *testing.T) {
	doc := func(brokers, kafka string) string {
		return `
kafka: {brokers: [` + brokers + `], group: g, topics: [t], reset_offset: earliest` + kafka + `}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@h/d?sslmode=verify-full"}
`
	}
	const (
		msk    = "b-1.mycluster.abc123.c2.kafka.us-east-1.amazonaws.com:9098"
		env    = ", sasl: {mechanism: AWS_MSK_IAM}"
		files  = ", sasl: {mechanism: aws_msk_iam, access_key_id_file: /run/aws/id, secret_access_key_file: /run/aws/secret, session_token_file: /run/aws/token}"
		tlsOn  = ", tls: {enabled: true}"
		allow  = ", allow_insecure: true"
		refuse = "kafka.sasl.mechanism AWS_MSK_IAM sends credentials to " + msk + " without TLS: turn kafka.tls on (enabled: true, or its files), or accept the risk with kafka.allow_insecure: true"
	)
	for _, tc := range []struct {
		name, doc, want string // want: a substring of the error; "" passes
	}{
		{"the environment's credentials, over TLS", doc(msk, env+tlsOn), ""},
		{"key files, over TLS", doc(msk, files+tlsOn), ""},
		{"without TLS to MSK", doc(msk, env), refuse},
		{"key files without TLS to MSK", doc(msk, files), refuse},
		{"without TLS, allowed", doc(msk, env+allow), ""},
		{"without TLS to loopback", doc("127.0.0.1:9098", env), ""},
		{"a session token alone", doc(msk, ", sasl: {mechanism: AWS_MSK_IAM, session_token_file: /run/aws/token}"+tlsOn), "kafka.sasl.session_token_file: only with"},
		{"the ID file alone", doc(msk, ", sasl: {mechanism: AWS_MSK_IAM, access_key_id_file: /run/aws/id}"+tlsOn), "kafka.sasl.access_key_id_file, secret_access_key_file: set both"},
		{"an inline key (no such key)", doc(msk, ", sasl: {mechanism: AWS_MSK_IAM, access_key_id: AKIA}"+tlsOn), "field access_key_id not found"},
		{"a password", doc(msk, ", sasl: {mechanism: AWS_MSK_IAM, password_file: /p}"+tlsOn), "not used by AWS_MSK_IAM"},
	} {
		_, err := config.Parse([]byte(tc.doc))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A real franz-go client, with the options every Kafka client of dedup
// takes (kafkaOpts), logs in with AWS_MSK_IAM over TLS to a kfake broker
// taught the broker's side of it (mskiamtest: the payload's fields, and
// its SigV4 signature recomputed by AWS's own signer with the secret
// key); produces and fetches a record after it. A wrong secret key is a
// start-up error naming the mechanism and where the key came from. What
// a real MSK adds (the IAM policy on kafka-cluster:Connect and the topic
// actions) is not modelled.
func TestKafkaOverMSKIAM(t *testing.T) {
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_DEFAULT_REGION"} {
		t.Setenv(k, "")
	}
	// kfake's 127.0.0.1 names no region (MSK's brokers do): AWS_REGION.
	const keyID, secret = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	ca := testpki.NewCA(t, "msk-ca")
	dir := t.TempDir()
	caFile := testpki.Write(t, dir, "ca.pem", ca.CertPEM)
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1").TLS(t)}}),
		kfake.SeedTopics(1, "events"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	broker := mskiamtest.Serve(c, map[string]string{keyID: secret})
	idFile := testpki.Write(t, dir, "id", []byte(keyID+"\n"))
	config := func(secretFile string) config.Config {
		doc := fmt.Sprintf(`
kafka:
  brokers: [%s]
  group: g
  topics: [events]
  reset_offset: earliest
  tls: {ca_file: %s}
  sasl: {mechanism: AWS_MSK_IAM, access_key_id_file: %s, secret_access_key_file: %s}
routes: [{id: a, match: {type: x}, workflow_type: W, task_queue: q}]
postgres: {url: "postgres://u@127.0.0.1/d"}
`, c.ListenAddrs()[0], caFile, idFile, secretFile)
		cfg, err := config.Parse([]byte(doc))
		if err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		return cfg
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cfg := config(testpki.Write(t, dir, "secret", []byte(secret+"\n")))
	t.Setenv("AWS_REGION", "")
	if _, err := cfg.Kafka.ClientOpts(); err == nil || !strings.Contains(err.Error(), "set AWS_REGION") {
		t.Errorf("no region for 127.0.0.1: %v", err)
	}
	t.Setenv("AWS_REGION", "us-east-1")
	kopts, err := cfg.Kafka.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(kopts, kgo.ConsumeTopics("events"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if ms, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism); len(ms) != 1 || ms[0].Name() != "AWS_MSK_IAM" {
		t.Fatalf("kgo.SASL %v, want the AWS_MSK_IAM mechanism", cl.OptValue(kgo.SASL))
	}
	if err := CheckKafka(ctx, cfg, log, kopts); err != nil {
		t.Fatalf("start-up check: %v", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "events", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fs := cl.PollRecords(ctx, 1)
	if err := fs.Err0(); err != nil || fs.NumRecords() != 1 {
		t.Fatalf("fetch after the login: %d records, %v", fs.NumRecords(), err)
	}
	logins := broker.Logins()
	if len(logins) < 2 { // the start-up check's client and cl
		t.Fatalf("%d logins, want one per client at least (refused: %v)", len(logins), broker.Refused())
	}
	for _, l := range logins {
		if l.AccessKey != keyID || l.Region != "us-east-1" {
			t.Errorf("login as %s in %s", l.AccessKey, l.Region)
		}
	}

	cfg = config(testpki.Write(t, dir, "wrong-secret", []byte("not-the-secret-key\n")))
	if kopts, err = cfg.Kafka.ClientOpts(); err != nil {
		t.Fatal(err)
	}
	err = CheckKafka(ctx, cfg, log, kopts)
	want := "kafka.sasl: broker " + c.ListenAddrs()[0] + " refused AWS_MSK_IAM authentication of the AWS access key in kafka.sasl.access_key_id_file"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a wrong secret key: %v, want %q", err, want)
	}
	t.Logf("%d logins accepted; then: %v", len(logins), err)
	if strings.Contains(err.Error(), "not-the-secret-key") || strings.Contains(err.Error(), keyID) {
		t.Errorf("the error quotes a key: %v", err)
	}
	if r := broker.Refused(); len(r) == 0 || !strings.Contains(r[0].Error(), "x-amz-signature does not verify") {
		t.Errorf("the broker's reasons: %v", r)
	}
}
