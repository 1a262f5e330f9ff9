package ingress

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadTokensRefuses: a tokens file without a token (only blank lines
// and comments) and one with a token shorter than 16 bytes are start-up
// errors naming ingress.tokens_file (and the line, never the token).
func TestLoadTokensRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string // want: a substring of the error; "" loads
	}{
		{"comments only", "# producers\n\n   \n# none yet\n", "ingress.tokens_file: " + "%s holds no token"},
		{"a short token", "# producers\n0123456789abcdef\nshort-token\n", "ingress.tokens_file: %s line 3: a token of 11 bytes, want at least 16"},
		{"tokens of 16 bytes or more", "# producers\n0123456789abcdef\n  another-token-of-some-length  \n", ""},
	} {
		path := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadTokens("ingress.tokens_file", path)
		want := strings.Replace(tc.want, "%s", path, 1)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "short-token") {
			t.Errorf("%s: the error shows the token: %v", tc.name, err)
		}
	}
}
