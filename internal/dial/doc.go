// Package dial opens dedup's clients from the config file, the way every
// command opens them: the producer client (OpenClient), the operators'
// Temporal client (DialToolTemporal), the start-up checks that stop on a
// refused Kafka login or TLS handshake (CheckKafka) or Temporal dial
// (DialTemporal), and the retentions the replay-horizon rule reads
// (ReadHorizon; the rule is sink/ledger's Horizon). The options themselves
// are built by public code next to the configs that carry them
// (processor.Config.ClientOpts, starter.Config.ClientOptions).
package dial
