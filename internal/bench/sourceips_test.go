package bench

import (
	"strings"
	"testing"
)

func TestParseSourceIPs(t *testing.T) {
	for _, tc := range []struct {
		in    string
		n     int
		first string
		last  string
	}{
		{"127.0.0.2-127.0.0.40", 39, "127.0.0.2", "127.0.0.40"},
		{"127.0.0.5", 1, "127.0.0.5", "127.0.0.5"},
		{" 10.0.0.1 , 10.0.0.3-10.0.0.4 ", 3, "10.0.0.1", "10.0.0.4"},
		{"10.0.0.255-10.0.1.1", 3, "10.0.0.255", "10.0.1.1"},
		{"192.168.1.0/30", 4, "192.168.1.0", "192.168.1.3"},
		{"192.168.1.7/30", 4, "192.168.1.4", "192.168.1.7"},
		{"::1-::3", 3, "::1", "::3"},
		{"127.0.0.9-127.0.0.9", 1, "127.0.0.9", "127.0.0.9"},
		{"::ffff:127.0.0.2-127.0.0.3", 2, "127.0.0.2", "127.0.0.3"},
	} {
		ips, err := ParseSourceIPs(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if len(ips) != tc.n || ips[0].String() != tc.first || ips[len(ips)-1].String() != tc.last {
			t.Errorf("%q: %d addresses %v..%v, want %d %s..%s", tc.in, len(ips), ips[0], ips[len(ips)-1], tc.n, tc.first, tc.last)
		}
	}
}

func TestParseSourceIPsErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "no address",
		" , ":                   "no address",
		"127.0.0.40-127.0.0.2":  "ends before it starts",
		"127.0.0.1-::1":         "mixes IPv4 and IPv6",
		"localhost":             "not an IP address",
		"127.0.0.1-x":           "not a range",
		"10.0.0.0/33":           "not a CIDR prefix",
		"10.0.0.0-10.1.0.0":     "more than 65536",
		"10.0.0.0/8":            "more than 65536",
		"127.0.0.2-127.0.0.3,z": "not an IP address",
	} {
		_, err := ParseSourceIPs(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %q", in, err, want)
		}
	}
}

func TestSourcePickerRoundRobin(t *testing.T) {
	ips, err := ParseSourceIPs("127.0.0.2-127.0.0.4")
	if err != nil {
		t.Fatal(err)
	}
	p := newSourcePicker(ips)
	var got []string
	for range 7 {
		got = append(got, p.pick())
	}
	want := "127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.2"
	if strings.Join(got, " ") != want {
		t.Fatalf("picks %v, want %s", got, want)
	}
	if (newSourcePicker(nil)).pick() != "" {
		t.Fatal("empty picker gave an address")
	}
}
