package tracing

import (
	"strings"
	"testing"
)

func ratio(r float64) *float64 { return &r }

// A bad tracing section is refused naming its field; the default is off.
func TestConfigValidateNamesTheField(t *testing.T) {
	if (Config{}).Enabled() || (Config{}).Validate() != nil {
		t.Fatal("the zero section: want off and valid")
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Exporter: "jaeger"}, "tracing.exporter"},
		{Config{Exporter: ExporterOTLP}, "tracing.otlp.endpoint"},
		{Config{Exporter: ExporterOTLP, OTLP: OTLP{Endpoint: "c:4317"}, SampleRatio: ratio(1.5)}, "tracing.sample_ratio"},
		{Config{Exporter: ExporterOTLP, OTLP: OTLP{Endpoint: "http://"}}, "tracing.otlp.endpoint"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
	if err := (Config{Exporter: ExporterOTLP, OTLP: OTLP{Endpoint: "collector:4317"}, SampleRatio: ratio(0.1)}).Validate(); err != nil {
		t.Errorf("a valid section: %v", err)
	}
}
