package farm

import (
	"reflect"
	"testing"
	"time"
)

// TestNodeCloneSharesNothing fills every field of a Node (pointers set,
// slices and maps of one element), clones it, and checks that the clone
// is equal and shares no pointer, slice or map with the original: a field
// added to Node (or to what it points to) that Clone forgets fails here.
func TestNodeCloneSharesNothing(t *testing.T) {
	var n Node
	fill(t, reflect.ValueOf(&n).Elem(), "Node")
	c := n.Clone()
	if !reflect.DeepEqual(n, c) {
		t.Fatalf("clone differs:\n got %+v\nwant %+v", c, n)
	}
	shared(t, reflect.ValueOf(n), reflect.ValueOf(c), "Node")

	var zero Node
	if z := zero.Clone(); !reflect.DeepEqual(z, zero) {
		t.Fatalf("clone of the zero node is %+v", z)
	}
}

var timeType = reflect.TypeOf(time.Time{})

// fill sets v, and everything it reaches, to non-zero values.
func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), path)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), path+"[0]")
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, path+" key")
		fill(t, e, path+" value")
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == timeType {
			v.Set(reflect.ValueOf(time.Unix(1, 0)))
			return
		}
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				t.Fatalf("%s has an unexported field: teach this test (and Clone) about it", path)
			}
			fill(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	default:
		t.Fatalf("%s: kind %s: teach this test (and Clone) about it", path, v.Kind())
	}
}

// shared fails when a and b (equal values) share a pointer, a slice's
// array or a map.
func shared(t *testing.T, a, b reflect.Value, path string) {
	t.Helper()
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s: the clone shares the pointer", path)
			return
		}
		shared(t, a.Elem(), b.Elem(), path)
	case reflect.Slice:
		if a.Len() == 0 {
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s: the clone shares the slice", path)
			return
		}
		for i := range a.Len() {
			shared(t, a.Index(i), b.Index(i), path+"[]")
		}
	case reflect.Map:
		if !a.IsNil() && a.Pointer() == b.Pointer() {
			t.Errorf("%s: the clone shares the map", path)
		}
	case reflect.Struct:
		if a.Type() == timeType {
			return
		}
		for i := range a.NumField() {
			shared(t, a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name)
		}
	}
}
