// Package connect holds, in its subpackages, how dedup's clients connect to
// Kafka and Temporal: the settings public configs carry, their builders,
// and the guard every dial goes through. It has no code of its own.
//
// It is a top-level folder because public types carry these settings
// (processor.Config.TLS and SASL, starter.Config.TLS), so another module
// that builds one must be able to import them, as franz-go keeps pkg/sasl
// public:
//
//   - connect/clienttls: TLS from files (a CA bundle, a client certificate
//     and its key), re-read per handshake, so a rotated certificate needs
//     no restart.
//   - connect/kafkasasl: kafka.sasl, the SASL mechanisms (PLAIN, SCRAM,
//     OAUTHBEARER, AWS_MSK_IAM).
//   - connect/secretfile: *_file secrets, re-read when they change; public
//     because kafkasasl, hence processor and client, use it.
//   - connect/dialguard: a credential goes off this machine only over TLS
//     that verifies the server, checked at every dial against the address
//     dialled: Kafka SASL to any broker (the seeds and the advertised ones)
//     without verified TLS only to loopback unless kafka.allow_insecure; the
//     same guard applies to options a caller of processor.New or client.New
//     built.
//
// Dialling itself, every Kafka client's options (TLS, SASL) with the
// start-up check that stops on a refused login or handshake, and the
// Temporal client's (mTLS, API key), is internal/app/dial.go.
package connect
