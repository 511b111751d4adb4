package fleet

import "testing"

// The node record's api_url points at the admin listener when there is
// one (the autoscaler drains nodes through it).
func TestAPIURLFollowsTheAdminListener(t *testing.T) {
	for _, tc := range []struct{ ws, admin, want string }{
		{"ws://10.0.0.1:8080/ws", "", "http://10.0.0.1:8080"},
		{"wss://10.0.0.1:8443/ws", "", "https://10.0.0.1:8443"},
		{"ws://10.0.0.1:8080/ws", ":9090", "http://10.0.0.1:9090"},
		{"ws://10.0.0.1:8080/ws", "[::]:9090", "http://10.0.0.1:9090"},
		{"ws://10.0.0.1:8080/ws", "192.168.1.5:9090", "http://192.168.1.5:9090"},
	} {
		if got := APIURL(tc.ws, tc.admin); got != tc.want {
			t.Errorf("APIURL(%q, %q) = %q, want %q", tc.ws, tc.admin, got, tc.want)
		}
	}
}
