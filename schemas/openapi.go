package schemas

import _ "embed"

// OpenAPI is the OpenAPI 3.1 description of dedup's HTTP ingress (`dedup
// ingress`), served at /v1/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
