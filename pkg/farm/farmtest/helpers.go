package farmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// waitLong bounds every wait for something that must happen (a delivery, a
// goroutine returning). It is generous on purpose: it only matters when a
// driver is broken, and then the test fails instead of hanging.
const waitLong = 30 * time.Second

// waitShort is how long the suites watch for something that must not happen
// (a delivery that should be held back). A broken driver shows itself well
// within it; a correct one is never affected by its length.
const waitShort = 250 * time.Millisecond

// ctxFor returns a context that ends after d and is cancelled with the test.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// wantErrIs fails the test unless err wraps target.
func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

// must fails the test on a non-nil error.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// normTime makes times comparable with ==/reflect.DeepEqual after a round
// trip through a driver: UTC, no monotonic reading.
func normTime(tm time.Time) time.Time {
	if tm.IsZero() {
		return time.Time{}
	}
	return tm.UTC().Round(0)
}

// base is a fixed instant with a nanosecond part, so drivers that drop
// precision are caught.
var base = time.Date(2024, 5, 17, 9, 30, 12, 123456789, time.UTC)

var timeType = reflect.TypeFor[time.Time]()

// normalize returns a deep copy of v with every time.Time in it made
// comparable (see normTime), so values read back from any driver can be
// compared with reflect.DeepEqual, whatever fields the farm types grow.
func normalize[T any](v T) T {
	src := reflect.ValueOf(&v).Elem()
	dst := reflect.New(src.Type()).Elem()
	copyNormalized(dst, src)
	return dst.Interface().(T)
}

func copyNormalized(dst, src reflect.Value) {
	if src.Type() == timeType {
		dst.Set(reflect.ValueOf(normTime(src.Interface().(time.Time))))
		return
	}
	switch src.Kind() {
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		p := reflect.New(src.Type().Elem())
		copyNormalized(p.Elem(), src.Elem())
		dst.Set(p)
	case reflect.Struct:
		for i := range src.NumField() {
			if dst.Field(i).CanSet() {
				copyNormalized(dst.Field(i), src.Field(i))
			}
		}
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := range src.Len() {
			copyNormalized(s.Index(i), src.Index(i))
		}
		dst.Set(s)
	case reflect.Map:
		if src.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		for it := src.MapRange(); it.Next(); {
			v := reflect.New(src.Type().Elem()).Elem()
			copyNormalized(v, it.Value())
			m.SetMapIndex(it.Key(), v)
		}
		dst.Set(m)
	default:
		dst.Set(src)
	}
}

var (
	digestType  = reflect.TypeFor[farm.Digest]()
	rawJSONType = reflect.TypeFor[json.RawMessage]()
)

// fillAll sets every exported field reachable from v (a pointer) to a
// distinct non-zero value, pointers allocated, so a round trip through a
// driver shows any field it drops, including fields added later.
func fillAll(v any) {
	n := 0
	fillValue(reflect.ValueOf(v).Elem(), &n)
}

func fillValue(v reflect.Value, n *int) {
	*n++
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(base.Add(time.Duration(*n)*time.Hour + time.Duration(*n))))
		return
	case v.Type() == digestType:
		v.Set(reflect.ValueOf(farm.DigestOf(fmt.Appendf(nil, "field %d", *n))))
		return
	case v.Type() == rawJSONType:
		// Raw JSON must be JSON for a driver to encode it.
		v.Set(reflect.ValueOf(json.RawMessage(fmt.Appendf(nil, `{"value":%d}`, *n))))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("value-%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillValue(p.Elem(), n)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				fillValue(v.Field(i), n)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fillValue(s.Index(0), n)
		fillValue(s.Index(1), n)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		fillValue(k, n)
		e := reflect.New(v.Type().Elem()).Elem()
		fillValue(e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}
