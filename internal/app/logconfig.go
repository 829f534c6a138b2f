package app

import (
	"reflect"
	"time"

	"go.uber.org/zap/zapcore"
)

// logObject logs a struct (the start-up configuration) field by field under
// its Go names, with every time.Duration as Go writes it ("5s", "500ms",
// "2m0s") rather than as nanoseconds, and nested structs as objects. Other
// fields are logged as their JSON encoding (secrets mask themselves).
type logObject struct{ v any }

// MarshalLogObject implements zapcore.ObjectMarshaler.
func (o logObject) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	return marshalStruct(enc, reflect.ValueOf(o.v))
}

type structValue reflect.Value

func (s structValue) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	return marshalStruct(enc, reflect.Value(s))
}

var durationType = reflect.TypeFor[time.Duration]()

func marshalStruct(enc zapcore.ObjectEncoder, v reflect.Value) error {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		fv := v.Field(i)
		switch {
		case fv.Type() == durationType:
			enc.AddString(f.Name, time.Duration(fv.Int()).String())
		case fv.Kind() == reflect.Struct:
			if err := enc.AddObject(f.Name, structValue(fv)); err != nil {
				return err
			}
		default:
			if err := enc.AddReflected(f.Name, fv.Interface()); err != nil {
				return err
			}
		}
	}
	return nil
}
