package devstack

// The Temporal part of the dev stack is adapted from go.temporal.io/server's
// temporaltest/internal lite server (MIT licence): an in-memory SQLite server
// with all four services in this process. temporaltest itself always picks a
// random port; the dev stack needs a fixed one (127.0.0.1:7233 by default) so
// that `dedup run` and the temporal CLI can be pointed at it.

import (
	"fmt"
	"math/rand/v2"
	"time"

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/metrics"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/testing/freeport"
	"go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
)

// TemporalConfig says where the embedded Temporal server listens.
type TemporalConfig struct {
	// IP the frontend binds to; 127.0.0.1 keeps it off the network.
	IP string
	// FrontendPort is the gRPC port clients dial; 0 picks a free one
	// (tests), 7233 is what every Temporal tool assumes (dev stack).
	FrontendPort int
	// Namespaces are registered before the server starts, with dedup's
	// search attributes.
	Namespaces []string
	// ExtraOptions are appended to the server options (interceptors, for
	// the fault-injection tests).
	ExtraOptions []temporal.ServerOption
	// Dynamic overrides dynamic config, e.g. frontend rate limits, or
	// ForceSearchAttributesCacheRefreshOnRead for a test that adds search
	// attributes while the server runs.
	Dynamic dynamicconfig.StaticClient
	// TLS, when set, serves the frontend over TLS (the server's own
	// config, Global.TLS, as a production cluster sets it).
	TLS *TemporalTLS
}

// TemporalTLS is the frontend's TLS. Files are PEM.
type TemporalTLS struct {
	// CertFile and KeyFile are the frontend's certificate and key.
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the frontend want a client
	// certificate signed by it (requireClientAuth: mutual TLS).
	ClientCAFile string
	// The server's own system worker dials the frontend too: with
	// WorkerCertFile and WorkerKeyFile as its client certificate,
	// verifying the frontend against CAFile and ServerName.
	WorkerCertFile, WorkerKeyFile string
	CAFile, ServerName            string
}

// Temporal is a running in-process Temporal server.
type Temporal struct {
	srv        temporal.Server
	hostPort   string
	metricsURL string
}

// HostPort is the frontend address to dial.
func (t *Temporal) HostPort() string { return t.hostPort }

// MetricsURL is the server's Prometheus endpoint (all four services).
func (t *Temporal) MetricsURL() string { return t.metricsURL }

// Stop shuts the server down; its state is lost (in-memory store).
func (t *Temporal) Stop() error { return t.srv.Stop() }

// StartTemporal starts an in-memory Temporal server with all services in
// this process and returns once its frontend accepts connections.
func StartTemporal(cfg TemporalConfig) (*Temporal, error) {
	if cfg.IP == "" {
		cfg.IP = "127.0.0.1"
	}
	if cfg.FrontendPort == 0 {
		cfg.FrontendPort = freeport.MustGetFreePort()
	}
	sqlCfg := &config.SQL{
		PluginName: sqliteplugin.PluginName,
		ConnectAttributes: map[string]string{
			"mode":  "memory",
			"cache": "shared",
		},
		DatabaseName: fmt.Sprintf("dedup-dev-%d", rand.IntN(1e9)),
	}
	front := fmt.Sprintf("%s:%d", cfg.IP, cfg.FrontendPort)
	svc := func(port int) config.Service {
		return config.Service{RPC: config.RPC{
			GRPCPort:       port,
			MembershipPort: freeport.MustGetFreePort(),
			BindOnIP:       cfg.IP,
		}}
	}
	sc := &config.Config{}
	sc.Global.Membership = config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: cfg.IP}
	metricsAt := fmt.Sprintf("%s:%d", cfg.IP, freeport.MustGetFreePort())
	sc.Global.Metrics = &metrics.Config{Prometheus: &metrics.PrometheusConfig{
		ListenAddress: metricsAt,
		HandlerPath:   "/metrics",
	}}
	sc.Global.PProf = config.PProf{Port: freeport.MustGetFreePort()}
	sc.Persistence = config.Persistence{
		DefaultStore:     sqliteplugin.PluginName,
		VisibilityStore:  sqliteplugin.PluginName,
		NumHistoryShards: 1,
		DataStores:       map[string]config.DataStore{sqliteplugin.PluginName: {SQL: sqlCfg}},
	}
	sc.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        "active",
		CurrentClusterName:       "active",
		ClusterInformation: map[string]cluster.ClusterInformation{
			"active": {Enabled: true, InitialFailoverVersion: 1, RPCAddress: front},
		},
	}
	sc.DCRedirectionPolicy = config.DCRedirectionPolicy{Policy: "noop"}
	sc.Services = map[string]config.Service{
		"frontend": svc(cfg.FrontendPort),
		"history":  svc(freeport.MustGetFreePort()),
		"matching": svc(freeport.MustGetFreePort()),
		"worker":   svc(freeport.MustGetFreePort()),
	}
	sc.Archival = config.Archival{
		History:    config.HistoryArchival{State: "disabled"},
		Visibility: config.VisibilityArchival{State: "disabled"},
	}
	sc.PublicClient = config.PublicClient{HostPort: front}
	if t := cfg.TLS; t != nil {
		client := config.ClientTLS{ServerName: t.ServerName, RootCAFiles: []string{t.CAFile}}
		server := config.ServerTLS{CertFile: t.CertFile, KeyFile: t.KeyFile}
		if t.ClientCAFile != "" {
			server.ClientCAFiles, server.RequireClientAuth = []string{t.ClientCAFile}, true
		}
		sc.Global.TLS = config.RootTLS{
			Frontend:     config.GroupTLS{Server: server, Client: client},
			SystemWorker: config.WorkerTLS{CertFile: t.WorkerCertFile, KeyFile: t.WorkerKeyFile, Client: client},
		}
	}
	sc.NamespaceDefaults = config.NamespaceDefaults{Archival: config.ArchivalNamespaceDefaults{
		History:    config.HistoryArchivalNamespaceDefaults{State: "disabled"},
		Visibility: config.VisibilityArchivalNamespaceDefaults{State: "disabled"},
	}}

	var nss []*sqlite.NamespaceConfig
	for _, ns := range cfg.Namespaces {
		// With dedup's search attributes, as temporal server start-dev
		// --search-attribute registers them.
		nc, err := sqlite.NewNamespaceConfig("active", ns, false, dedupSearchAttributes())
		if err != nil {
			return nil, fmt.Errorf("configuring namespace %q: %w", ns, err)
		}
		nss = append(nss, nc)
	}
	if err := sqlite.CreateNamespaces(sqlCfg, nss...); err != nil {
		return nil, fmt.Errorf("creating namespaces: %w", err)
	}
	logger := log.NewNoopLogger()
	authorizer, err := authorization.GetAuthorizerFromConfig(&sc.Global.Authorization)
	if err != nil {
		return nil, fmt.Errorf("building authorizer: %w", err)
	}
	claims, err := authorization.GetClaimMapperFromConfig(&sc.Global.Authorization, logger)
	if err != nil {
		return nil, fmt.Errorf("building claim mapper: %w", err)
	}
	// Not ForceSearchAttributesCacheRefreshOnRead (what `temporal server
	// start-dev` sets, and a production server does not): with it every
	// start that carries search attributes reads its namespace from
	// persistence, one at a time under the namespace registry's lock,
	// within 3 s, and a read that times out (the one SQLite connection
	// busy under load) is answered "Namespace default is not found."
	// (TestStartWithSearchAttributesIsServedFromTheNamespaceCache). Search
	// attributes added while the server runs reach its caches within its
	// refresh intervals instead; a test that adds them can set it in
	// Dynamic.
	dyn := dynamicconfig.StaticClient{}
	for k, v := range cfg.Dynamic {
		dyn[k] = v
	}
	opts := []temporal.ServerOption{
		temporal.WithConfig(sc),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claims }),
		temporal.WithDynamicConfigClient(dyn),
	}
	opts = append(opts, cfg.ExtraOptions...)
	srv, err := temporal.NewServer(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating temporal server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("starting temporal server: %w", err)
	}
	// The lite server sleeps here too: ringpop may still be settling.
	time.Sleep(100 * time.Millisecond)
	return &Temporal{srv: srv, hostPort: front, metricsURL: "http://" + metricsAt + "/metrics"}, nil
}
