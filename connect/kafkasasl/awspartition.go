package kafkasasl

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// awsRegion is the region the AWS SDKs read, and the variable it came
// from: AWS_REGION, else AWS_DEFAULT_REGION ("" when neither is set).
func awsRegion(getenv func(string) string) (region, from string) {
	if r := getenv("AWS_REGION"); r != "" {
		return r, "AWS_REGION"
	}
	return getenv("AWS_DEFAULT_REGION"), "AWS_DEFAULT_REGION"
}

// awsPartition is one AWS partition: its name, its regions' names and its
// DNS suffix and dual-stack suffix, as aws-sdk-go-v2's partitions.json
// lists them (regionRegex, dnsSuffix, dualStackDnsSuffix; franz-go's
// signer, v1.22.3, reads a region in hosts of every one).
type awsPartition struct {
	name     string
	regions  *regexp.Regexp
	suffixes [2]string
}

// awsPartitions: no two match one region. GovCloud shares the commercial
// suffixes: a broker's partition is its signed region's (checkBrokers).
var awsPartitions = []awsPartition{
	{"aws", regexp.MustCompile(`^(us|eu|ap|sa|ca|me|af|il|mx)\-\w+\-\d+$`), [2]string{"amazonaws.com", "api.aws"}},
	{"aws-us-gov", regexp.MustCompile(`^us\-gov\-\w+\-\d+$`), [2]string{"amazonaws.com", "api.aws"}},
	{"aws-cn", regexp.MustCompile(`^cn\-\w+\-\d+$`), [2]string{"amazonaws.com.cn", "api.amazonwebservices.com.cn"}},
	{"aws-iso", regexp.MustCompile(`^us\-iso\-\w+\-\d+$`), [2]string{"c2s.ic.gov", "api.aws.ic.gov"}},
	{"aws-iso-b", regexp.MustCompile(`^us\-isob\-\w+\-\d+$`), [2]string{"sc2s.sgov.gov", "api.aws.scloud"}},
	{"aws-iso-e", regexp.MustCompile(`^eu\-isoe\-\w+\-\d+$`), [2]string{"cloud.adc-e.uk", "api.cloud-aws.adc-e.uk"}},
	{"aws-iso-f", regexp.MustCompile(`^us\-isof\-\w+\-\d+$`), [2]string{"csp.hci.ic.gov", "api.aws.hci.ic.gov"}},
	{"aws-eusc", regexp.MustCompile(`^eusc\-(de)\-\w+\-\d+$`), [2]string{"amazonaws.eu", "api.amazonwebservices.eu"}},
}

// globalRegion is the commercial partition's pseudo-region of global
// endpoints (partitions.json's regions): the AWS SDKs' STS goes to
// sts.amazonaws.com for it, as dedup does with no region.
const globalRegion = "aws-global"

// regionPartition is the partition whose regionRegex region matches, the
// commercial one for "" and aws-global (STS's global endpoint), the zero awsPartition
// (name "") for a region of none: an upper-case name ("US-GOV-WEST-1",
// which DNS would take for GovCloud's), a service's name ("s3"), a typo.
func regionPartition(region string) awsPartition {
	if region == "" || region == globalRegion {
		return awsPartitions[0]
	}
	for _, p := range awsPartitions {
		if p.regions.MatchString(region) {
			return p
		}
	}
	return awsPartition{}
}

// stsEndpoint is where AssumeRoleWithWebIdentity goes:
// AWS_ENDPOINT_URL_STS (else AWS_ENDPOINT_URL) when set and not switched
// off by AWS_IGNORE_CONFIGURED_ENDPOINT_URLS, as the AWS SDKs read them (a
// VPC endpoint, a proxy); else STS's regional endpoint (regionalSTS). The
// token is a bearer credential: http:// is refused but to a loopback host.
func stsEndpoint(getenv func(string) string) (string, error) {
	if ep := endpointURL(getenv); ep != "" {
		u, err := url.Parse(ep)
		switch {
		case err != nil || u.Host == "" || u.Scheme != "https" && u.Scheme != "http":
			// Not quoted: a value that is no URL may carry a password
			// where url.URL.Redacted cannot find it.
			return "", errors.New("AWS_ENDPOINT_URL_STS (or AWS_ENDPOINT_URL) is not an http(s) URL, https://HOST[:PORT][/PATH] (its value is not repeated here: it may hold a password)")
		case u.Scheme == "http" && !httpLoopback(u.Hostname()):
			return "", fmt.Errorf("AWS_ENDPOINT_URL_STS (or AWS_ENDPOINT_URL): http:// to %s would send the web identity token without TLS: use https://", u.Hostname())
		}
		return ep, nil
	}
	_, ep, _, err := regionalSTS(getenv)
	return ep, err
}

// redacted is endpoint, a URL stsEndpoint took, with its password hidden.
func redacted(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "the STS endpoint"
	}
	return u.Redacted()
}

// endpointURL is the STS endpoint the operator named, "" for none.
func endpointURL(getenv func(string) string) string {
	if strings.EqualFold(getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"), "true") {
		return ""
	}
	return first(getenv("AWS_ENDPOINT_URL_STS"), getenv("AWS_ENDPOINT_URL"))
}

// regionalSTS is the STS of the region in AWS_REGION (else
// AWS_DEFAULT_REGION), which EKS sets in pods: its partition, its
// endpoint, https://sts.REGION.SUFFIX/ (the global one,
// https://sts.amazonaws.com/, with no region or aws-global), and where
// the region came from, for errors. FIPS, as the AWS SDKs turn it on
// (AWS_USE_FIPS_ENDPOINT=true, or a pseudo-region fips-REGION or
// REGION-fips), is https://sts-fips.REGION.SUFFIX/ (GovCloud's regional
// endpoints are FIPS already). A region of no partition (a partition not
// listed in awsPartitions, a typo, a service's name: "s3" would make
// sts.s3.amazonaws.com, S3's name of a bucket called sts) is an error
// naming its variable: AWS_ENDPOINT_URL_STS names such an endpoint.
func regionalSTS(getenv func(string) string) (p awsPartition, endpoint, at string, err error) {
	region, from := awsRegion(getenv)
	at = from + " " + region
	fips, err := envBool(getenv, "AWS_USE_FIPS_ENDPOINT")
	if err != nil {
		return p, "", at, err
	}
	dual, err := envBool(getenv, "AWS_USE_DUALSTACK_ENDPOINT")
	if err != nil {
		return p, "", at, err
	}
	name := region
	if r, ok := strings.CutPrefix(name, "fips-"); ok {
		name, fips = r, true
	} else if r, ok := strings.CutSuffix(name, "-fips"); ok {
		name, fips = r, true
	}
	if region == "" || region == globalRegion {
		if fips || dual {
			return p, "", at, errors.New("AWS_USE_FIPS_ENDPOINT or AWS_USE_DUALSTACK_ENDPOINT: STS has no global FIPS or dual-stack endpoint: set AWS_REGION")
		}
		if region == "" {
			at = "no AWS_REGION, STS's global endpoint"
		}
		return awsPartitions[0], "https://sts.amazonaws.com/", at, nil
	}
	if p = regionPartition(name); p.name == "" || !hostLabel(name) || name == globalRegion {
		return awsPartition{}, "", at, fmt.Errorf("%s %q is no region of an AWS partition dedup knows (us-east-1, cn-north-1, us-gov-west-1, …, in lower case): the web identity token would go to sts.REGION.…: set the region, or AWS_ENDPOINT_URL_STS", from, region)
	}
	// aws-sdk-go-v2's STS rules: FIPS and dual-stack, sts-fips. on the
	// dual-stack suffix; FIPS, sts-fips. (GovCloud: sts., FIPS already);
	// dual-stack, sts. on the dual-stack suffix.
	host, suffix := "sts.", p.suffixes[0]
	if dual {
		suffix = p.suffixes[1]
	}
	if fips && (dual || p.name != "aws-us-gov") {
		host = "sts-fips."
	}
	return p, "https://" + host + name + "." + suffix + "/", at, nil
}

// envBool is an AWS SDK switch: "true" or "false" in any case, "" false;
// anything else an error naming it.
func envBool(getenv func(string) string, name string) (bool, error) {
	switch v := getenv(name); {
	case strings.EqualFold(v, "true"):
		return true, nil
	case v == "" || strings.EqualFold(v, "false"):
		return false, nil
	default:
		return false, fmt.Errorf("%s %q is neither true nor false", name, v)
	}
}

// signedRegion is the region of an AWS_MSK_IAM login payload's credential
// scope (x-amz-credential: KEY/DATE/REGION/kafka-cluster/aws4_request).
func signedRegion(payload []byte) string {
	var p struct {
		Credential string `json:"x-amz-credential"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return ""
	}
	if f := strings.Split(p.Credential, "/"); len(f) == 5 {
		return f[2]
	}
	return ""
}

// regionName says whether r names a region (no pseudo-region such as
// aws-global or us-east-1-fips): what a signature's scope must name.
func regionName(r string) bool {
	return r != globalRegion && hostLabel(r) && regionPartition(r).name != ""
}

// hostLabel says whether s is one DNS label of lower-case letters, digits
// and '-' (63 at most), as aws-sdk-go-v2's STS requires of a region (its
// \w takes '_' too), in the case a SigV4 scope compares exactly (DNS
// would take "us-East-1", MSK's signature check would not).
func hostLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}
