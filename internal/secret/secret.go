// Package secret forwards to connect/secretfile, where the code moved so
// that public packages (connect/kafkasasl, hence processor and client) use
// no internal package. It stays only for internal/ingress/auth.go, which
// is being rewritten elsewhere: once that lands importing secretfile,
// delete this package.
package secret

import "github.com/dedupio/dedup/connect/secretfile"

// File is secretfile.File.
type File = secretfile.File

// Read is secretfile.Read.
func Read(key, path string) (string, error) { return secretfile.Read(key, path) }

// NewFile is secretfile.NewFile.
func NewFile(key, path string) (*File, error) { return secretfile.NewFile(key, path) }
