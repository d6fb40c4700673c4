package cpuset

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  string // substring of the error; "" = no error
	}{
		{"0", []int{0}, ""},
		{"2-3,6", []int{2, 3, 6}, ""},
		{" 6, 2-3 ,3\n", []int{2, 3, 6}, ""},
		{"0-0", []int{0}, ""},
		{"1023", []int{1023}, ""},
		{"", nil, "empty"},
		{"  ", nil, "empty"},
		{"1,", nil, "empty element"},
		{",1", nil, "empty element"},
		{"3-1", nil, "backwards"},
		{"-1", nil, "empty element"},
		{"1-", nil, "empty element"},
		{"a", nil, "not a CPU number"},
		{"1-2-3", nil, "not a CPU number"},
		{"+1", nil, "not a CPU number"},
		{"1024", nil, "out of range"},
		{"99999999999999999999", nil, "out of range"},
	} {
		got, err := Parse(tc.in)
		if tc.bad != "" {
			if err == nil || !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("Parse(%q) = %v, %v; want an ErrSyntax error with %q", tc.in, got, err, tc.bad)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{6, 2, 3}, "2-3,6"},
		{[]int{0, 1, 2, 3, 5, 7, 8, 8}, "0-3,5,7-8"},
	} {
		if got := Format(tc.in); got != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.in, got, tc.want)
		}
		if len(tc.in) > 0 {
			back, err := Parse(Format(tc.in))
			c := slices.Clone(tc.in)
			slices.Sort(c)
			if err != nil || !slices.Equal(back, slices.Compact(c)) {
				t.Errorf("Parse(Format(%v)) = %v, %v", tc.in, back, err)
			}
		}
	}
}

func TestCheckUsable(t *testing.T) {
	if err := CheckUsable([]int{0, 1}, []int{0, 1, 2}, "online"); err != nil {
		t.Fatal(err)
	}
	err := CheckUsable([]int{1, 5, 6}, []int{0, 1}, "online")
	if err == nil || err.Error() != "CPU 5-6 not online (0-1 are)" {
		t.Fatalf("got %v", err)
	}
}

func TestPinEmpty(t *testing.T) {
	if _, err := Pin(nil); err == nil {
		t.Fatal("Pin(nil) succeeded")
	}
	if _, err := Pin([]int{MaxCPU}); err == nil {
		t.Fatal("Pin of an out-of-range CPU succeeded")
	}
}

// TestPinAllThreads pins a child copy of the test binary (which first
// starts goroutines that block in system calls, so the runtime has many
// threads) to one CPU and checks every thread's Cpus_allowed_list.
func TestPinAllThreads(t *testing.T) {
	if os.Getenv("CPUSET_PIN_CHILD") == "1" {
		pinChild()
		return
	}
	allowed, err := Allowed()
	if err != nil || len(allowed) == 0 {
		t.Fatalf("Allowed: %v %v", allowed, err)
	}
	cpu := allowed[len(allowed)-1]
	cmd := exec.Command(os.Args[0], "-test.run=^TestPinAllThreads$")
	cmd.Env = append(os.Environ(), "CPUSET_PIN_CHILD=1", "CPUSET_PIN_CPU="+Format([]int{cpu}))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "pinned-ok") {
		t.Fatalf("child did not report: %s", out)
	}
}

func pinChild() {
	cpus, err := Parse(os.Getenv("CPUSET_PIN_CPU"))
	if err != nil {
		panic(err)
	}
	// Goroutines blocked in a read each hold a thread.
	var wg sync.WaitGroup
	rs := make([]*os.File, 0, 8)
	for range 8 {
		r, w, err := os.Pipe()
		if err != nil {
			panic(err)
		}
		rs = append(rs, r)
		defer w.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b [1]byte
			_, _ = r.Read(b[:])
		}()
	}
	if _, err := Pin(cpus); err != nil {
		os.Stdout.WriteString("pin: " + err.Error() + "\n")
		os.Exit(1)
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	want := Format(cpus)
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) != want {
				os.Stdout.WriteString(p + ": " + strings.TrimSpace(v) + ", want " + want + "\n")
				os.Exit(1)
			}
		}
	}
	if len(tasks) < 2 {
		os.Stdout.WriteString("only " + Format([]int{len(tasks)}) + " threads\n")
		os.Exit(1)
	}
	for _, r := range rs {
		r.Close()
	}
	os.Stdout.WriteString("pinned-ok\n")
}
