package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// NewLogin creates a login user with a fresh name and password in the
// server of adminURL (a superuser's URL), a member of groups, and returns
// adminURL with that user's credentials in place of the admin's. When
// setRole is not empty, the user's sessions start as that role (ALTER ROLE
// ... SET role), as a migrator's do, so that what it creates is owned by
// the group. The user is dropped when the test ends. Roles are per cluster:
// the groups must exist (ledger.ApplyRoles). What the user owns in
// adminURL's database is dropped with it.
func NewLogin(t testing.TB, adminURL, setRole string, groups ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	name := fmt.Sprintf("dedup_test_login_%d_%d", seq.Add(1), time.Now().UnixNano()%1e9)
	password := hex.EncodeToString(b)
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("connecting as the admin: %v", err)
	}
	defer func() { _ = admin.Close(ctx) }()
	user := pgx.Identifier{name}.Sanitize()
	stmts := []string{fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, user, password)}
	for _, g := range groups {
		stmts = append(stmts, fmt.Sprintf(`GRANT %s TO %s`, pgx.Identifier{g}.Sanitize(), user))
	}
	if setRole != "" {
		stmts = append(stmts, fmt.Sprintf(`ALTER ROLE %s SET role = %s`, user, pgx.Identifier{setRole}.Sanitize()))
	}
	for _, s := range stmts {
		if _, err := admin.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Errorf("dropping login %s: %v", name, err)
			return
		}
		defer func() { _ = admin.Close(ctx) }()
		// What it owns or was granted in adminURL's database goes first.
		if _, err := admin.Exec(ctx, `DROP OWNED BY `+user+`; DROP ROLE `+user); err != nil {
			t.Errorf("dropping login %s: %v", name, err)
		}
	})
	if strings.Contains(adminURL, "://") {
		u, err := url.Parse(adminURL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(name, password)
		return u.String()
	}
	return adminURL + fmt.Sprintf(" user=%s password=%s", name, password)
}
