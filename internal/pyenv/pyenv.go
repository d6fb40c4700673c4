// Package pyenv builds, for tests, a fresh Python virtual environment with
// the repository's python/ package installed the way README tells users to:
//
//	/usr/bin/python3 -m venv --system-site-packages DIR
//	DIR/bin/pip install --no-index --no-build-isolation ./python
//
// --system-site-packages keeps Debian's torch and numpy visible; nothing is
// fetched from a package index.
package pyenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// SystemPython is Debian's interpreter, the one with python3-torch.
const SystemPython = "/usr/bin/python3"

// RepoRoot returns the directory holding go.mod, searching upwards from
// the working directory. Errors if there is none.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("pyenv: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Install creates a venv under t.TempDir(), installs python/ into it and
// returns the venv's python interpreter. The test is skipped when
// /usr/bin/python3 or its venv module is missing, unless OS2G_REQUIRE_ALL
// is set, when it fails instead (CI must run it).
func Install(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(SystemPython); err != nil {
		missing(t, "%s: %v", SystemPython, err)
	}
	if err := exec.Command(SystemPython, "-c", "import venv, ensurepip").Run(); err != nil {
		missing(t, "%s has no venv/ensurepip module (apt-get install python3-venv): %v", SystemPython, err)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	venv := filepath.Join(t.TempDir(), "venv")
	run(t, "", SystemPython, "-m", "venv", "--system-site-packages", venv)
	py := filepath.Join(venv, "bin", "python")
	// pip builds in a copy of the source so that no build/ or *.egg-info
	// directory is left in the repository.
	src := filepath.Join(t.TempDir(), "src")
	run(t, "", "cp", "-r", filepath.Join(root, "python"), src)
	run(t, "", py, "-m", "pip", "install", "--quiet", "--no-index", "--no-build-isolation", src)
	return py
}

func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("OS2G_REQUIRE_ALL") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

func run(t testing.TB, dir string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}
