// Package python_test installs the python/ package into a fresh virtual
// environment, as README tells users to, and runs python/tests there.
package python_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/os2g/os2g/internal/pyenv"
)

// TestPackageInVenv runs every python/tests/test_*.py with the venv's
// interpreter, from a directory outside the repository so that "import
// os2g" resolves to the installed copy.
func TestPackageInVenv(t *testing.T) {
	py := pyenv.Install(t)
	tests, err := filepath.Abs("tests")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", tests, "-t", tests)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("python output:\n%s", out)
	if err != nil {
		t.Fatalf("python tests failed: %v", err)
	}
}
