package main

import "testing"

func TestParseList(t *testing.T) {
	if got, err := parseList("1, 16,128"); err != nil || len(got) != 3 || got[2] != 128 {
		t.Errorf("parseList = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "1,x", "-3", "20000"} {
		if _, err := parseList(bad); err == nil {
			t.Errorf("parseList(%q) accepted", bad)
		}
	}
}
