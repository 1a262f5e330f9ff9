package pgbouncer

// SetPickPort replaces how Start picks a port, until restore.
func SetPickPort(f func() (int, error)) (restore func()) {
	old := pickPort
	pickPort = f
	return func() { pickPort = old }
}

// Port is the port PgBouncer was started on.
func (b *Bouncer) Port() int { return b.port }
