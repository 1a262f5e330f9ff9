package kafkasasl

import (
	"net/url"
	"os"
	"strings"
	"testing"
)

// stsEndpoint's partition domains are "as franz-go's signer knows them"
// (awsiam.go). Since franz-go v1.22.3 the signer knows every partition of
// aws-sdk-go-v2's partitions.json: it signs logins for brokers in the EU
// sovereign cloud (amazonaws.eu), ISO-E (cloud.adc-e.uk) and ISO-F
// (csp.hci.ic.gov), so CheckBrokers passes them, and a router on IRSA in
// such a region (EKS sets AWS_REGION) exchanges its web identity token at
// the STS of that region's partition, sts.REGION.SUFFIX, not at a host of
// the commercial partition that has no such region.
func TestSTSEndpointIsInThePartitionOfEveryRegionTheSignerSignsFor(t *testing.T) {
	noAWSEnv(t)
	c := Config{Mechanism: AWSMSKIAM}
	for _, tc := range []struct {
		region, suffix string
	}{
		{"eusc-de-east-1", "amazonaws.eu"},
		{"eu-isoe-west-1", "cloud.adc-e.uk"},
		{"us-isof-south-1", "csp.hci.ic.gov"},
	} {
		broker := "b-1.mycluster.abc123.c2.kafka." + tc.region + "." + tc.suffix + ":9098"
		// Only a broker the signer takes is a case: start-up refuses the
		// others (CheckBrokers), as it did all three before v1.22.3.
		if err := c.CheckBrokers([]string{broker}); err != nil {
			t.Logf("%s: refused at start-up: %v", broker, err)
			continue
		}
		want := "https://sts." + tc.region + "." + tc.suffix + "/"
		got, err := stsEndpoint(func(k string) string {
			if k == "AWS_REGION" {
				return tc.region
			}
			return ""
		})
		if err != nil || got != want {
			t.Errorf("AWS_REGION=%s (broker %s, which the signer signs for): STS endpoint %q %v, want %q (the region's partition)",
				tc.region, broker, got, err, want)
		}
	}
}

// The same brokers on IRSA without AWS_REGION (nor AWS_DEFAULT_REGION):
// with franz-go v1.22.2 start-up refused them ("set AWS_REGION"), as the
// signer found no region in their names. v1.22.3's signer finds it, so
// CheckBrokers passes, and the web identity token goes to STS's global
// endpoint, sts.amazonaws.com: the commercial partition's, which knows
// no role of the broker's partition. Every login fails there, after the
// token (a bearer credential) has left for another partition. A broker
// start-up takes must have its token exchanged in its own partition.
func TestAWebIdentityForABrokerOfAnotherPartitionIsExchangedInThatPartition(t *testing.T) {
	for _, tc := range []struct {
		region, suffix string
	}{
		{"eusc-de-east-1", "amazonaws.eu"},
		{"eu-isoe-west-1", "cloud.adc-e.uk"},
		{"us-isof-south-1", "csp.hci.ic.gov"},
	} {
		noAWSEnv(t)
		t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/dedup")
		t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", writeTemp(t, "jwt"))
		c := Config{Mechanism: AWSMSKIAM}
		broker := "b-1.mycluster.abc123.c2.kafka." + tc.region + "." + tc.suffix + ":9098"
		if err := c.CheckBrokers([]string{broker}); err != nil {
			t.Logf("%s: refused at start-up: %v", broker, err)
			continue
		}
		if _, err := c.Build(); err != nil {
			t.Fatalf("%s: Build: %v", broker, err)
		}
		ep, err := stsEndpoint(func(string) string { return "" })
		u, perr := url.Parse(ep)
		if err != nil || perr != nil || !strings.HasSuffix(u.Hostname(), "."+tc.suffix) {
			t.Errorf("broker %s (region %s, taken at start-up), no AWS_REGION: the web identity token goes to %q %v, "+
				"want an STS endpoint of the broker's partition (….%s)", broker, tc.region, ep, err, tc.suffix)
		}
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "token")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}
