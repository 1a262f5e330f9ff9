package dial

import (
	"testing"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
