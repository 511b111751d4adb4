package wsgatev1_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsCurrent runs the generator (make generate) into a
// temporary folder and compares its output with the committed files.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("../../../scripts/generate.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/generate.sh: %v\n%s", err, b)
	}
	for _, f := range []string{"proto/wsgate/v1/api.pb.go", "proto/wsgate/v1/wsgatev1connect/api.connect.go"} {
		want, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("../../..", f))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from the generator's output: run make generate", f)
		}
	}
}
