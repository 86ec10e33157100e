package peers

import (
	"slices"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	tail := " 0 -1 4194560 500 0 0 0 120 30 7 3 20 0 1 0 5000 12345678 900 18446744073709551615"
	tests := []struct {
		name, in string
		want     ProcStat
		wantErr  string
	}{
		{name: "plain", in: "100 (nginx) S 1 100 100" + tail + "\n",
			want: ProcStat{PID: 100, PPID: 1, UTime: 120, STime: 30, StartTime: 5000}},
		{name: "command with spaces and parentheses", in: "42 (a) (b c)) R 7 42 42" + tail,
			want: ProcStat{PID: 42, PPID: 7, UTime: 120, STime: 30, StartTime: 5000}},
		{name: "no command", in: "100 nginx S 1", wantErr: "parentheses"},
		{name: "too short", in: "100 (nginx) S 1 2 3", wantErr: "fields after the command name"},
		{name: "bad number", in: "100 (nginx) S x 100 100" + tail, wantErr: "field 4"},
		{name: "bad pid", in: "abc (nginx) S 1 100 100" + tail, wantErr: "pid"},
	}
	for _, tt := range tests {
		got, err := ParseStat([]byte(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: got %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		name, in string
		want     int64
		wantErr  bool
	}{
		{"live process", "Name:\tnginx\nVmHWM:\t  9000 kB\nVmRSS:\t    8120 kB\nRssAnon:\t 10 kB\n", 8120 << 10, false},
		{"zombie without VmRSS", "Name:\tx\nState:\tZ (zombie)\n", 0, false},
		{"wrong unit", "VmRSS:\t8120 MB\n", 0, true},
		{"not a number", "VmRSS:\tlots kB\n", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseVmRSS([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s: got %d, %v; want %d (error %v)", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseMachineCPU(t *testing.T) {
	tests := []struct {
		name, in string
		want     uint64
		wantErr  bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice: only user,
		// nice, system and steal count (guest time is already in user and nice).
		{"full line", "cpu  10 1 5 100 7 2 3 4 6 1\ncpu0 5 0 2 50 3 1 1 2 3 0\n", 10 + 1 + 5 + 4, false},
		{"old kernel, fewer fields", "cpu 10 1 5 100 7\n", 16, false},
		{"per-cpu line first", "cpu0 1 2 3 4 5\n", 0, true},
		{"garbage", "cpu a b c d e\n", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseMachineCPU([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s: got %d, %v; want %d (error %v)", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

// testdata/proc is a fake /proc: 100 is an nginx master with workers 101 and 102;
// 150 (a child of 101, with a hostile command name) and 160 (a zombie child of 102,
// no VmRSS) are grandchildren; 1 and 200 are not in the tree; "self" is not a process.
func TestProcFSTreeAndUsage(t *testing.T) {
	fs := ProcFS{Root: "testdata/proc"}
	tree, err := fs.Tree(100)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range tree {
		pids = append(pids, p.PID)
	}
	if want := []int{100, 101, 102, 150, 160}; !slices.Equal(pids, want) {
		t.Errorf("tree of 100 = %v, want %v", pids, want)
	}

	u, err := fs.Usage(100)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(4000+20000+18000+512) << 10; u.RSS != want {
		t.Errorf("RSS = %d, want %d", u.RSS, want)
	}
	// utime+stime of each: 120+30, 900+400, 800+350, 1+2, 50+50 (children's cutime
	// and cstime are not counted: they would count reaped children twice).
	if want := uint64(150 + 1300 + 1150 + 3 + 100); u.Ticks != want {
		t.Errorf("ticks = %d, want %d", u.Ticks, want)
	}
	if got := u.CPUSeconds(); got != 27.03 {
		t.Errorf("CPU seconds = %v, want 27.03", got)
	}

	if leaf, err := fs.Usage(150); err != nil || leaf.RSS != 512<<10 || len(leaf.Procs) != 1 {
		t.Errorf("usage of a leaf = %+v, %v; want its own 512 kB only", leaf, err)
	}
	if _, err := fs.Tree(999); err == nil || !strings.Contains(err.Error(), "999") {
		t.Errorf("tree of a missing process: error %v, want one naming it", err)
	}
	if busy, err := fs.MachineBusy(); err != nil || busy != 161518+7+81536+5 {
		t.Errorf("machine busy = %d, %v", busy, err)
	}
}
