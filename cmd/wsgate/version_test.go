package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The npm package @wsgate/client carries the server's version: in its
// package.json, its lock file and the VERSION its module exports; and the
// changelog has a section for it.
func TestVersionsAgree(t *testing.T) {
	code, out := runBin(t, nil, "version")
	if code != 0 || strings.TrimSpace(out) != "wsgate "+version {
		t.Fatalf("wsgate version: exit %d, %q; want %q", code, out, "wsgate "+version)
	}
	for _, f := range []string{"../../web/client/package.json", "../../web/client/package-lock.json"} {
		var pkg struct {
			Version string `json:"version"`
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &pkg); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if pkg.Version != version {
			t.Errorf("%s: version %q, the server's is %q", f, pkg.Version, version)
		}
	}
	js, err := os.ReadFile("../../web/client/wsgate.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^export const VERSION = '([^']*)';`).FindSubmatch(js)
	if m == nil || string(m[1]) != version {
		t.Errorf("web/client/wsgate.js VERSION: %q, the server's is %q", m, version)
	}
	cl, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	// "## [Unreleased] - 0.1.0-dev" before a release, "## [0.1.0] - date" after.
	v := regexp.QuoteMeta(version)
	if !regexp.MustCompile(`(?m)^## (\[Unreleased\] - ` + v + `|\[` + v + `\] - \d{4}-\d\d-\d\d)$`).Match(cl) {
		t.Errorf("CHANGELOG.md has no section for %s", version)
	}
}
