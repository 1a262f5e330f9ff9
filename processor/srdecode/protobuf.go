package srdecode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// mainProto is the file name the schema itself is compiled as; its
// references are compiled under their names (the import paths).
const mainProto = "dedup-schema-registry-main.proto"

// compileProtobuf compiles the registry's .proto text with its references
// (and the well-known types) and returns a decoder that picks the message
// by the value's message indexes.
func compileProtobuf(ctx context.Context, text string, refs map[string]schemaText) (func([]byte) ([]byte, error), error) {
	files := map[string]string{mainProto: text}
	for name, s := range refs {
		files[name] = s.Schema
	}
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(files),
		}),
	}
	fds, err := c.Compile(ctx, mainProto)
	if err != nil {
		return nil, err
	}
	fd := fds[0]
	if fd.Messages().Len() == 0 {
		return nil, errors.New("no message in the schema")
	}
	return func(b []byte) ([]byte, error) {
		idx, payload, err := MessageIndexes(b)
		if err != nil {
			return nil, err
		}
		md, err := messageAt(fd, idx)
		if err != nil {
			return nil, err
		}
		msg := dynamicpb.NewMessage(md)
		if err := proto.Unmarshal(payload, msg); err != nil {
			return nil, fmt.Errorf("message %s: %w", md.FullName(), err)
		}
		if err := unknownFields(msg); err != nil {
			return nil, err
		}
		out, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg)
		if err != nil {
			return nil, fmt.Errorf("message %s: %w", md.FullName(), err)
		}
		// protojson varies its white space on purpose; the value is compact.
		var buf bytes.Buffer
		if err := json.Compact(&buf, out); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}, nil
}

// messageAt follows the message indexes: the first picks a top-level
// message of the file, each next one a message nested in the last.
func messageAt(fd protoreflect.FileDescriptor, idx []int) (protoreflect.MessageDescriptor, error) {
	msgs := fd.Messages()
	var md protoreflect.MessageDescriptor
	for depth, i := range idx {
		if i >= msgs.Len() {
			return nil, fmt.Errorf("message index %v: no message %d at depth %d (%d there)", idx, i, depth, msgs.Len())
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	return md, nil
}
