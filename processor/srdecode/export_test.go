package srdecode

import "github.com/hamba/avro/v2"

// AvroJSON is decodeAvro for the tests.
func AvroJSON(schema string, payload []byte) ([]byte, error) {
	sch, err := avro.Parse(schema)
	if err != nil {
		return nil, err
	}
	return decodeAvro(sch, payload)
}
