package starter

import (
	"context"
	"log/slog"
	"net"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/dedupio/dedup/connect/clienttls"
	"github.com/dedupio/dedup/connect/secretfile"
)

// ClientOptions are the SDK client options for c's Temporal: the address,
// the namespace, the gRPC compression, TLS (TLS; mutual TLS with a client
// certificate) and the API key (APIKey, APIKeyFile). Every Temporal client
// of dedup is dialled with them, and so may a stranger's that New is given:
// the settings Validate checks are the settings the connection uses.
// Certificate and key files are read here once (a missing one is an error
// naming its key) and again, when they changed, at each handshake or call.
// log takes the SDK's logs and the warning of an unverified server; nil
// discards.
func (c Config) ClientOptions(log *slog.Logger) (client.Options, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := client.Options{
		HostPort:  c.HostPort,
		Namespace: c.Namespace,
		Logger:    tlog.NewStructuredLogger(log.With("component", "temporal-sdk")),
		ConnectionOptions: client.ConnectionOptions{
			GrpcCompression: Compression(c.Compression),
		},
	}
	files, err := clienttls.Load(c.TLS, "temporal.tls")
	if err != nil {
		return client.Options{}, err
	}
	if files != nil {
		host, _, err := net.SplitHostPort(c.HostPort)
		if err != nil {
			host = c.HostPort
		}
		o.ConnectionOptions.TLS = files.ClientConfig(host)
		if files.InsecureSkipVerify() {
			log.Warn("temporal.tls.insecure_skip_verify is set: the Temporal server's certificate is NOT verified; anyone on the network path can pose as Temporal and read the workflows' inputs and the credentials sent over it",
				"host_port", c.HostPort)
		}
	}
	switch {
	case c.APIKeyFile != "":
		f, err := secretfile.NewFile("temporal.api_key_file", c.APIKeyFile)
		if err != nil {
			return client.Options{}, err
		}
		o.Credentials = client.NewAPIKeyDynamicCredentials(func(context.Context) (string, error) { return f.Get() })
	case c.APIKey != "":
		o.Credentials = client.NewAPIKeyStaticCredentials(c.APIKey)
	}
	// With an API key and no temporal.tls, the SDK turns TLS on with the
	// system's roots: a key is never sent in plaintext.
	return o, nil
}
