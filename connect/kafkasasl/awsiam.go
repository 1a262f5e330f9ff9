package kafkasasl

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	mskiam "github.com/twmb/franz-go/pkg/sasl/aws"

	"github.com/dedupio/dedup/connect/secretfile"
)

// AWS_MSK_IAM's credentials come from the first of these that is set,
// in the order the AWS SDKs look at them (the part of their chain that
// applies to a pod): the kafka.sasl files, the environment's keys, a web
// identity. A source that is set but incomplete is an error, not a reason
// to fall through to the next: credentials from a source nobody meant
// would be worse than none.
const (
	awsNone = iota
	awsFiles
	awsEnvKeys
	awsWebIdentity
)

// awsSource is the source AWS_MSK_IAM's credentials come from.
func (c Config) awsSource(getenv func(string) string) int {
	switch {
	case c.AccessKeyIDFile != "" || c.SecretAccessKeyFile != "":
		return awsFiles
	case getenv("AWS_ACCESS_KEY_ID") != "" || getenv("AWS_SECRET_ACCESS_KEY") != "":
		return awsEnvKeys
	case getenv("AWS_ROLE_ARN") != "" || getenv("AWS_WEB_IDENTITY_TOKEN_FILE") != "":
		return awsWebIdentity
	}
	return awsNone
}

// awsIdentity says where the credentials come from, for errors. It quotes
// no key: a role ARN is a name, not a secret.
func (c Config) awsIdentity(getenv func(string) string) string {
	switch c.awsSource(getenv) {
	case awsFiles:
		return "the AWS access key in kafka.sasl.access_key_id_file"
	case awsEnvKeys:
		return "the AWS access key in AWS_ACCESS_KEY_ID"
	case awsWebIdentity:
		return fmt.Sprintf("AWS role %q (AWS_ROLE_ARN, web identity)", getenv("AWS_ROLE_ARN"))
	}
	return "no AWS credentials"
}

// CheckBrokers says, for AWS_MSK_IAM, which seed broker a login could
// not be signed for: the signature's region is the one in the broker's
// name (b-1.….kafka.us-east-1.amazonaws.com), else AWS_REGION or
// AWS_DEFAULT_REGION, and a name with no region (an IP address, a DNS
// alias, a tunnel) needs one of those. It asks franz-go's signer itself,
// with a throwaway key, so that the rule is franz-go's. With a web
// identity it also refuses a broker, or an AWS_ROLE_ARN, of another AWS
// partition than the STS endpoint the token would be exchanged at
// (stsEndpoint): the token is a bearer credential, and that STS knows no
// role of the broker's partition. Errors name brokers as kafka.brokers
// gives them. nil for other mechanisms.
func (c Config) CheckBrokers(brokers []string) error {
	return c.checkBrokers(brokers, os.Getenv)
}

func (c Config) checkBrokers(brokers []string, getenv func(string) string) error {
	if c.Name() != AWSMSKIAM {
		return nil
	}
	dry := mskiam.Auth{AccessKey: "check", SecretKey: "check"}.AsManagedStreamingIAMMechanism()
	addrs := make([]string, len(brokers))
	for i, b := range brokers {
		addr, err := dialAddr(b)
		if err != nil {
			return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: %w", err)
		}
		addrs[i] = addr
		_, msg, err := dry.Authenticate(context.Background(), addr)
		if err != nil {
			return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: broker %s: %v: set AWS_REGION to the cluster's region (an MSK broker's own name, ….kafka.REGION.amazonaws.com, carries it)", b, err)
		}
		if r := signedRegion(msg); !regionName(r) {
			return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: broker %s: franz-go's signer would sign its logins for %q, which is no AWS region (it reads the label before ….amazonaws.com in the broker's name, else AWS_REGION): name the broker as MSK does (….kafka.REGION.amazonaws.com), or set AWS_REGION to the cluster's region", b, r)
		}
	}
	if c.awsSource(getenv) != awsWebIdentity || endpointURL(getenv) != "" {
		return nil // no token, or an STS endpoint the operator named
	}
	sts, _, at, err := regionalSTS(getenv)
	if err != nil {
		return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: %w", err)
	}
	// The role's ARN names its partition: an STS of another one knows no
	// such role, whatever the brokers' names say.
	role := getenv("AWS_ROLE_ARN")
	if p, err := roleARNPartition(role); err != nil {
		return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: %w", err)
	} else if p != sts.name {
		return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: AWS_ROLE_ARN %s is of AWS partition %s, but the web identity token would be exchanged at an STS of partition %s (%s), which knows no role of another partition: set AWS_REGION to a region of the role's partition, or AWS_ENDPOINT_URL_STS", role, p, sts.name, at)
	}
	for i, b := range brokers {
		if p := hostPartition(addrs[i]); p != "" && p != sts.name {
			return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: broker %s is in AWS partition %s, but the web identity token would be exchanged at an STS of partition %s (%s), which knows no role of the broker's: set AWS_REGION to the cluster's region, or AWS_ENDPOINT_URL_STS", b, p, sts.name, at)
		}
	}
	return nil
}

// dialAddr is a seed broker as franz-go dials it: host:port, port 9092
// when kafka.brokers gives none (a name, an IPv4 address, an IPv6 one
// bare or in brackets). A seed with a bracket that is neither "[IPv6]"
// nor "[IPv6]:port" is an error naming it, where franz-go would dial
// something else than was meant ("[fd00::1]9098": port 98; "[]": this
// machine).
func dialAddr(b string) (string, error) {
	if !strings.ContainsAny(b, "[]") {
		if _, _, err := net.SplitHostPort(b); err == nil {
			return b, nil
		}
		return net.JoinHostPort(b, "9092"), nil
	}
	ip, port, err := net.SplitHostPort(b)
	if err != nil && strings.HasPrefix(b, "[") && strings.HasSuffix(b, "]") {
		ip, port, err = b[1:len(b)-1], "9092", nil
	}
	if a, perr := netip.ParseAddr(ip); err != nil || perr != nil || !a.Is6() || !strings.HasPrefix(b, "[") {
		return "", fmt.Errorf("broker %q in kafka.brokers is neither [IPv6] nor [IPv6]:port", b)
	}
	return net.JoinHostPort(ip, port), nil
}

// roleResource is an IAM role's resource, role/[PATH/]NAME: IAM's
// path ("/", or "/" printable ASCII "/") and role name ([\w+=,.@-], 64
// at most). A trailing newline or space (a value made from a file), or
// "role//NAME", is none.
var roleResource = regexp.MustCompile(`^role/(?:[!-~]+/)?[\w+=,.@-]{1,64}$`)

// sessionName is what STS takes as RoleSessionName.
var sessionName = regexp.MustCompile(`^[\w+=,.@-]{2,64}$`)

// roleARNPartition is the partition an IAM role's ARN names,
// arn:PARTITION:iam::ACCOUNT:role/NAME, or an error naming AWS_ROLE_ARN
// when it is none: STS takes no other, and the token must not leave for
// nothing.
func roleARNPartition(role string) (string, error) {
	f := strings.SplitN(role, ":", 6)
	if len(f) != 6 || f[0] != "arn" || f[1] == "" || f[2] != "iam" || f[3] != "" || len(f[4]) != 12 ||
		strings.Trim(f[4], "0123456789") != "" || !roleResource.MatchString(f[5]) {
		return "", fmt.Errorf("AWS_ROLE_ARN %q is not an IAM role's ARN (arn:PARTITION:iam::ACCOUNT:role/NAME)", role)
	}
	return f[1], nil
}

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
// signer reads a region in hosts of aws, aws-us-gov, aws-cn, aws-iso and
// aws-iso-b; from v1.22.3, of every one).
type awsPartition struct {
	name     string
	regions  *regexp.Regexp
	suffixes [2]string
}

// awsPartitions: no two match one region. GovCloud shares the commercial
// suffixes: a host of them is told apart by the region label in its name
// (hostPartition).
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

// hostPartition is the name of the partition a broker (host:port) is in
// by its DNS suffix, "" when it is in none (an IP address, an alias). Of
// the partitions that share a suffix (aws, aws-us-gov), the one of the
// last label before it that is a region's name: the region the signer
// signs for in an MSK broker's name (….kafka.us-gov-west-1.amazonaws.com),
// not a cluster's name the operator chose (b-1.us-gov-west-1.….kafka.us-east-1.…).
func hostPartition(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, p := range awsPartitions {
		for _, s := range p.suffixes {
			if !strings.HasSuffix(host, "."+s) { // no suffix ends another
				continue
			}
			labels := strings.Split(strings.TrimSuffix(host, "."+s), ".")
			for i := len(labels) - 1; i >= 0; i-- {
				if q := regionPartition(labels[i]); q.name != "" && q.suffixes == p.suffixes {
					return q.name
				}
			}
			return p.name
		}
	}
	return ""
}

// awsCredentials is the credentials callback of the AWS_MSK_IAM
// mechanism, called at each login. Files and the web identity token are
// read once here, so that a missing one is a start-up error naming it.
func (c Config) awsCredentials(getenv func(string) string) (func(context.Context) (mskiam.Auth, error), error) {
	switch c.awsSource(getenv) {
	case awsFiles:
		return c.awsFiles()
	case awsEnvKeys:
		id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY")
		if id == "" || secret == "" {
			return nil, errors.New("kafka.sasl.mechanism AWS_MSK_IAM: set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, or neither")
		}
		auth := mskiam.Auth{AccessKey: id, SecretKey: secret, SessionToken: getenv("AWS_SESSION_TOKEN")}
		return func(context.Context) (mskiam.Auth, error) { return auth, nil }, nil
	case awsWebIdentity:
		return webIdentity(getenv)
	}
	return nil, errors.New("kafka.sasl.mechanism AWS_MSK_IAM: no AWS credentials: set kafka.sasl.access_key_id_file and secret_access_key_file, " +
		"or in the environment AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE (EKS IAM roles for service accounts)")
}

// awsFiles reads the key files at each login, each again only when it
// changed. The two (three) files are read one after the other: a rotation
// that replaces them one by one can pair an old ID with a new secret for
// one login, which the broker refuses and the client retries. A mounted
// Kubernetes Secret is replaced whole, at once.
func (c Config) awsFiles() (func(context.Context) (mskiam.Auth, error), error) {
	id, err := secretfile.NewFile("kafka.sasl.access_key_id_file", c.AccessKeyIDFile)
	if err != nil {
		return nil, err
	}
	secret, err := secretfile.NewFile("kafka.sasl.secret_access_key_file", c.SecretAccessKeyFile)
	if err != nil {
		return nil, err
	}
	var token *secretfile.File
	if c.SessionTokenFile != "" {
		if token, err = secretfile.NewFile("kafka.sasl.session_token_file", c.SessionTokenFile); err != nil {
			return nil, err
		}
	}
	return func(context.Context) (mskiam.Auth, error) {
		var a mskiam.Auth
		var err error
		if a.AccessKey, err = id.Get(); err != nil {
			return mskiam.Auth{}, err
		}
		if a.SecretKey, err = secret.Get(); err != nil {
			return mskiam.Auth{}, err
		}
		if token != nil {
			if a.SessionToken, err = token.Get(); err != nil {
				return mskiam.Auth{}, err
			}
		}
		return a, nil
	}, nil
}

// webIdentity exchanges the token in AWS_WEB_IDENTITY_TOKEN_FILE (which
// the kubelet keeps fresh) for temporary credentials of AWS_ROLE_ARN, by
// STS AssumeRoleWithWebIdentity, as the AWS SDKs do for EKS IAM roles for
// service accounts (IRSA). AWS_ROLE_SESSION_NAME names the session, if
// set. See stsWebIdentity for the endpoint and the renewal.
func webIdentity(getenv func(string) string) (func(context.Context) (mskiam.Auth, error), error) {
	role, path := getenv("AWS_ROLE_ARN"), getenv("AWS_WEB_IDENTITY_TOKEN_FILE")
	if role == "" || path == "" {
		return nil, errors.New("kafka.sasl.mechanism AWS_MSK_IAM: set both AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE in the environment, or neither")
	}
	if _, err := roleARNPartition(role); err != nil {
		return nil, fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: %w", err)
	}
	token, err := secretfile.NewFile("AWS_WEB_IDENTITY_TOKEN_FILE", path)
	if err != nil {
		return nil, err
	}
	endpoint, err := stsEndpoint(getenv)
	if err != nil {
		return nil, err
	}
	session := getenv("AWS_ROLE_SESSION_NAME")
	if session != "" && !sessionName.MatchString(session) {
		return nil, fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: AWS_ROLE_SESSION_NAME %q is not a name STS takes (2 to 64 of letters, digits and +=,.@_-)", session)
	}
	s := &stsWebIdentity{
		endpoint: endpoint,
		role:     role,
		session:  first(session, "dedup-"+strconv.FormatInt(time.Now().UnixNano(), 10)),
		token:    token,
		client: &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			// A 307/308 would send the token again, to a host no
			// start-up check saw: it goes to the endpoint checked, only.
			return fmt.Errorf("STS answered a redirect to %s: not followed (the web identity token goes to %s only)", req.URL.Redacted(), redacted(endpoint))
		}},
	}
	return func(ctx context.Context) (mskiam.Auth, error) {
		a, err := s.get(ctx)
		if err != nil {
			return mskiam.Auth{}, fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: assuming role %s with the web identity token in %s (AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE): %w", role, path, err)
		}
		return a, nil
	}, nil
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

// stsWebIdentity holds the credentials of one role, renewed by STS
// AssumeRoleWithWebIdentity when they are within five minutes of expiry,
// with the token as its file holds it then. The call is STS's query API,
// unsigned (the token is the proof of identity), over HTTPS:
// https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html
// A renewal that fails while the held credentials are still valid keeps
// them: an STS hiccup does not fail logins.
type stsWebIdentity struct {
	endpoint, role, session string
	token                   *secretfile.File
	client                  *http.Client

	mu      sync.Mutex // held across a renewal: concurrent logins wait for it
	creds   mskiam.Auth
	expires time.Time
}

func (s *stsWebIdentity) get(ctx context.Context) (mskiam.Auth, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Until(s.expires) > 5*time.Minute {
		return s.creds, nil
	}
	// franz-go calls with its client's context, which has no deadline.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var (
		creds   mskiam.Auth
		expires time.Time
		err     error
	)
	// Three tries, as the AWS SDKs, of what they retry: STS's 5xx,
	// IDPCommunicationError (the identity provider did not answer STS)
	// and InvalidIdentityToken (which can pass while STS fetches the
	// provider's keys).
	for try := 1; ; try++ {
		var retry bool
		creds, expires, retry, err = s.assumeRole(ctx)
		if err == nil || !retry || try == 3 || !pause(ctx, time.Duration(try)*200*time.Millisecond) {
			break
		}
	}
	if err != nil {
		if time.Now().Before(s.expires) {
			return s.creds, nil
		}
		return mskiam.Auth{}, err
	}
	s.creds, s.expires = creds, expires
	return creds, nil
}

// assumeRole is one AssumeRoleWithWebIdentity call; retry says whether
// STS asks for another try.
func (s *stsWebIdentity) assumeRole(ctx context.Context) (mskiam.Auth, time.Time, bool, error) {
	token, err := s.token.Get()
	if err != nil {
		return mskiam.Auth{}, time.Time{}, false, err
	}
	form := url.Values{
		"Action":           {"AssumeRoleWithWebIdentity"},
		"Version":          {"2011-06-15"},
		"RoleArn":          {s.role},
		"RoleSessionName":  {s.session},
		"WebIdentityToken": {token},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return mskiam.Auth{}, time.Time{}, false, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	resp, err := s.client.Do(req)
	if err != nil {
		return mskiam.Auth{}, time.Time{}, true, fmt.Errorf("calling STS: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return mskiam.Auth{}, time.Time{}, true, fmt.Errorf("reading STS's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code    string `xml:"Error>Code"`
			Message string `xml:"Error>Message"`
		}
		_ = xml.Unmarshal(body, &e)
		retry := resp.StatusCode >= 500 || e.Code == "InvalidIdentityToken" || e.Code == "IDPCommunicationError"
		if e.Code == "" {
			return mskiam.Auth{}, time.Time{}, retry, fmt.Errorf("STS answered %s", resp.Status)
		}
		return mskiam.Auth{}, time.Time{}, retry, fmt.Errorf("STS answered %s: %s: %s", resp.Status, e.Code, e.Message)
	}
	var r struct {
		AccessKeyID     string    `xml:"AssumeRoleWithWebIdentityResult>Credentials>AccessKeyId"`
		SecretAccessKey string    `xml:"AssumeRoleWithWebIdentityResult>Credentials>SecretAccessKey"`
		SessionToken    string    `xml:"AssumeRoleWithWebIdentityResult>Credentials>SessionToken"`
		Expiration      time.Time `xml:"AssumeRoleWithWebIdentityResult>Credentials>Expiration"`
	}
	if err := xml.Unmarshal(body, &r); err != nil {
		return mskiam.Auth{}, time.Time{}, false, fmt.Errorf("reading STS's answer: %w", err)
	}
	if r.AccessKeyID == "" || r.SecretAccessKey == "" || r.SessionToken == "" || r.Expiration.IsZero() {
		return mskiam.Auth{}, time.Time{}, false, errors.New("STS's answer has no credentials")
	}
	return mskiam.Auth{AccessKey: r.AccessKeyID, SecretKey: r.SecretAccessKey, SessionToken: r.SessionToken}, r.Expiration, false, nil
}

// pause waits d, or less if ctx ends first: then it returns false.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
