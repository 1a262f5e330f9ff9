package kafkasasl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
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
// with a throwaway key, so that the rule is franz-go's. nil for other
// mechanisms.
func (c Config) CheckBrokers(brokers []string) error {
	if c.Name() != AWSMSKIAM {
		return nil
	}
	dry := mskiam.Auth{AccessKey: "check", SecretKey: "check"}.AsManagedStreamingIAMMechanism()
	for _, b := range brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			b = net.JoinHostPort(b, "9092") // franz-go's default port
		}
		if _, _, err := dry.Authenticate(context.Background(), b); err != nil {
			return fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: broker %s: %v: set AWS_REGION to the cluster's region (an MSK broker's own name, ….kafka.REGION.amazonaws.com, carries it)", b, err)
		}
	}
	return nil
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
// service accounts (IRSA). The credentials are kept until five minutes
// before they expire; the token file is read again for each exchange.
// STS is the regional endpoint of AWS_REGION (else AWS_DEFAULT_REGION,
// else the global one), or AWS_ENDPOINT_URL_STS (else AWS_ENDPOINT_URL)
// when set. AWS_ROLE_SESSION_NAME names the session, if set.
func webIdentity(getenv func(string) string) (func(context.Context) (mskiam.Auth, error), error) {
	role, path := getenv("AWS_ROLE_ARN"), getenv("AWS_WEB_IDENTITY_TOKEN_FILE")
	if role == "" || path == "" {
		return nil, errors.New("kafka.sasl.mechanism AWS_MSK_IAM: set both AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE in the environment, or neither")
	}
	token, err := secretfile.NewFile("AWS_WEB_IDENTITY_TOKEN_FILE", path)
	if err != nil {
		return nil, err
	}
	o := sts.Options{Region: first(getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"), "aws-global")}
	if ep := first(getenv("AWS_ENDPOINT_URL_STS"), getenv("AWS_ENDPOINT_URL")); ep != "" {
		o.BaseEndpoint = &ep
	}
	session := first(getenv("AWS_ROLE_SESSION_NAME"), "dedup-"+strconv.FormatInt(time.Now().UnixNano(), 10))
	provider := stscreds.NewWebIdentityRoleProvider(sts.New(o), role, identityToken{token},
		func(o *stscreds.WebIdentityRoleOptions) { o.RoleSessionName = session })
	creds := aws.NewCredentialsCache(provider, func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = 5 * time.Minute })
	return func(ctx context.Context) (mskiam.Auth, error) {
		// franz-go calls this with its client's context, which has no
		// deadline: STS gets 30s (with the SDK's retries).
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cr, err := creds.Retrieve(ctx)
		if err != nil {
			return mskiam.Auth{}, fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: assuming role %s with the web identity token in %s (AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE): %w", role, path, err)
		}
		return mskiam.Auth{AccessKey: cr.AccessKeyID, SecretKey: cr.SecretAccessKey, SessionToken: cr.SessionToken}, nil
	}, nil
}

// identityToken reads the web identity token as any secret file: again
// when it changed, without its trailing newline.
type identityToken struct{ f *secretfile.File }

func (t identityToken) GetIdentityToken() ([]byte, error) {
	s, err := t.f.Get()
	return []byte(s), err
}

func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
