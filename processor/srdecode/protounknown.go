package srdecode

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// unknownFields is an error naming the first field of m (or of a message
// in it) that m's schema does not name, or nil. protojson leaves such
// fields out, so a value framed with another message's schema ID would
// decode to {} (every record of it one event): it is undecodable instead.
// A value written by a newer writer schema than the one its ID names
// (a serializer's use.latest.version) is refused too: the fields it has
// beyond the schema would be dropped from the logical value.
func unknownFields(m protoreflect.Message) error {
	if raw := m.GetUnknown(); len(raw) > 0 {
		num, _, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return fmt.Errorf("message %s: bytes its schema does not read", m.Descriptor().FullName())
		}
		return fmt.Errorf("message %s: field %d is not in the schema (a value written with another schema?)", m.Descriptor().FullName(), num)
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				err = unknownFields(mv.Message())
				return err == nil
			})
		case fd.IsList():
			if fd.Message() == nil {
				return true
			}
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = unknownFields(l.Get(i).Message())
			}
		case fd.Message() != nil:
			err = unknownFields(v.Message())
		}
		return err == nil
	})
	return err
}
