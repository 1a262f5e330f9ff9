package otlp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupio/dedup/connect/tracing"
)

// Off is no exporter at all; a headers file is read as "name: value"
// lines, and a bad one is refused naming the setting.
func TestNewReadsTheHeadersFile(t *testing.T) {
	if tr, err := New(context.Background(), tracing.Config{}, "x"); tr != nil || err != nil {
		t.Fatalf("off: %v, %v; want nil, nil", tr, err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("# vendor\nX-Api-Key: s3cret\n\nteam: core\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := readHeaders(good)
	if err != nil || h["x-api-key"] != "s3cret" || h["team"] != "core" || len(h) != 2 {
		t.Errorf("headers %v, %v", h, err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("no colon here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := tracing.Config{Exporter: tracing.ExporterOTLP, OTLP: tracing.OTLP{Endpoint: "127.0.0.1:4317", Insecure: true, HeadersFile: bad}}
	if _, err := New(context.Background(), cfg, "x"); err == nil || !strings.Contains(err.Error(), "tracing.otlp.headers_file") {
		t.Errorf("a bad headers file: %v, want an error naming tracing.otlp.headers_file", err)
	}
	cfg.OTLP.HeadersFile = good
	tr, err := New(context.Background(), cfg, "x")
	if err != nil || tr == nil {
		t.Fatalf("on: %v, %v", tr, err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Errorf("shutdown with nothing to flush: %v", err)
	}
}
