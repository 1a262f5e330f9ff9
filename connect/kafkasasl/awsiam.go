package kafkasasl

import (
	"context"
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
	"time"

	mskiam "github.com/twmb/franz-go/pkg/sasl/aws"

	"github.com/dedupio/dedup/connect/secretfile"
)

// AWS_MSK_IAM's credentials come from the first of these that is set,
// in the order the AWS SDKs look at them (the part of their chain that
// applies to a pod): the kafka.sasl files, the environment's keys, a web
// identity, the container credentials endpoint (EKS Pod Identity, ECS). A source that is set but incomplete is an error, not a reason
// to fall through to the next: credentials from a source nobody meant
// would be worse than none.
const (
	awsNone = iota
	awsFiles
	awsEnvKeys
	awsWebIdentity
	awsContainer
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
	case containerSet(getenv):
		return awsContainer
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
	case awsContainer:
		if ep, from, err := containerEndpoint(getenv); err == nil {
			return fmt.Sprintf("the AWS container credentials endpoint %s (%s)", containerShown(ep, from), from)
		}
		return "the AWS container credentials endpoint (" + containerFullURI + ", " + containerRelativeURI + ")"
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
	signed := make([]string, len(brokers)) // the region each seed's logins are signed for
	for i, b := range brokers {
		addr, err := dialAddr(b)
		if err != nil {
			return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: %w", err)
		}
		_, msg, err := dry.Authenticate(context.Background(), addr)
		if err != nil {
			return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: broker %s: %v: set AWS_REGION to the cluster's region (an MSK broker's own name, ….kafka.REGION.amazonaws.com, carries it)", b, err)
		}
		r := signedRegion(msg)
		if !regionName(r) {
			return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: broker %s: franz-go's signer would sign its logins for %q, which is no AWS region (it reads the last region label before an AWS DNS suffix in the broker's name, else AWS_REGION): name the broker as MSK does (….kafka.REGION.amazonaws.com), or set AWS_REGION to the cluster's region", b, r)
		}
		signed[i] = r
	}
	// The seeds are one cluster's, in one region: MSK refuses a login
	// signed for another (its SigV4 scope names the region), so a seed
	// signed for another region than the others fails every login.
	for i := range brokers {
		if signed[i] != signed[0] {
			return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: broker %s's logins would be signed for %s and broker %s's for %s, but the seeds are one cluster's, in one region (franz-go's signer takes the region in a broker's name, else AWS_REGION, else AWS_DEFAULT_REGION): list one cluster's brokers, and for a name without a region set AWS_REGION to the cluster's", brokers[0], signed[0], brokers[i], signed[i])
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
	// The credentials are the STS's partition's; a login is signed for
	// the region the signer reads (the broker's name, else AWS_REGION),
	// and that region's partition is the one that must know them.
	for i, b := range brokers {
		if p := regionPartition(signed[i]).name; p != sts.name {
			return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: broker %s is in AWS partition %s (its logins are signed for %s), but the web identity token would be exchanged at an STS of partition %s (%s), which knows no role of the broker's: set AWS_REGION to the cluster's region, or AWS_ENDPOINT_URL_STS", b, p, signed[i], sts.name, at)
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
	case awsContainer:
		return containerCredentials(getenv)
	}
	return nil, errors.New("kafka.sasl.mechanism AWS_MSK_IAM: no AWS credentials: set kafka.sasl.access_key_id_file and secret_access_key_file, " +
		"or in the environment AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE (EKS IAM roles for service accounts), " +
		"or AWS_CONTAINER_CREDENTIALS_FULL_URI (EKS Pod Identity) or AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (an ECS task's role)")
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
	if role != "" && path == "" && containerSet(getenv) {
		// The AWS SDKs would pass over AWS_ROLE_ARN to the container
		// endpoint; dedup takes no source half set.
		return nil, errors.New("kafka.sasl.mechanism AWS_MSK_IAM: AWS_ROLE_ARN is set without AWS_WEB_IDENTITY_TOKEN_FILE, beside the container credentials endpoint (EKS Pod Identity, ECS): unset AWS_ROLE_ARN to use the endpoint (the AWS SDKs would, passing over it), or set AWS_WEB_IDENTITY_TOKEN_FILE for the role")
	}
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
			return &refusedRedirect{fmt.Sprintf("STS answered a redirect to %s: not followed (the web identity token goes to %s only)", req.URL.Redacted(), redacted(endpoint))}
		}},
	}
	r := newAWSRenewal(s.assumeRole)
	return func(ctx context.Context) (mskiam.Auth, error) {
		a, err := r.get(ctx)
		if err != nil {
			return mskiam.Auth{}, fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: assuming role %s with the web identity token in %s (AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE): %w", role, path, err)
		}
		return a, nil
	}, nil
}

// stsWebIdentity exchanges the token for the credentials of one role,
// by STS AssumeRoleWithWebIdentity. The call is STS's query API, unsigned
// (the token is the proof of identity), over HTTPS:
// https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html
// An awsRenewal holds what it returns.
type stsWebIdentity struct {
	endpoint, role, session string
	token                   *secretfile.File
	client                  *http.Client
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
		return mskiam.Auth{}, time.Time{}, retriable(err), fmt.Errorf("calling STS: %w", err)
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
