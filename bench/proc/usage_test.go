package proc

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The fixture in testdata/proc: nginx (100) with workers 101 and 102, a
// grandchild 150 and a zombie 160; 1 and 200 are unrelated.
func TestTreeUsage(t *testing.T) {
	const root = "testdata/proc"
	u, err := treeUsage(root, 100)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range u.Procs {
		pids = append(pids, p.PID)
	}
	if want := []int{100, 101, 102, 150, 160}; !slices.Equal(pids, want) {
		t.Errorf("tree of 100 = %v, want %v", pids, want)
	}
	if want := int64(4000+20000+18000+512) << 10; u.RSS != want {
		t.Errorf("RSS = %d, want %d", u.RSS, want)
	}
	// utime+stime of each: 120+30, 900+400, 800+350, 1+2, 50+50.
	if want := uint64(150 + 1300 + 1150 + 3 + 100); u.Ticks != want {
		t.Errorf("ticks = %d, want %d", u.Ticks, want)
	}
	if got := u.CPUSeconds(); got != 27.03 {
		t.Errorf("CPU seconds = %v, want 27.03", got)
	}
	if leaf, err := treeUsage(root, 150); err != nil || leaf.RSS != 512<<10 || len(leaf.Procs) != 1 {
		t.Errorf("usage of a leaf = %+v, %v; want its own 512 kB only", leaf, err)
	}
	if _, err := treeUsage(root, 999); err == nil || !strings.Contains(err.Error(), "999") {
		t.Errorf("tree of a missing process: error %v, want one naming it", err)
	}
	busy, err := machineBusy(root)
	// user, nice, system, irq, softirq and steal of the fixture's cpu line
	if want := float64(161518+7+81536+0+4124+5) / userHZ; err != nil || math.Abs(busy-want) > 1e-6 {
		t.Errorf("machine busy = %v, %v; want %v", busy, err, want)
	}
}

// A live child: its tree is found, and Stop ends a descendant that Usage saw
// even when the child itself does not pass SIGTERM on.
func TestUsageAndStopLiveTree(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	dir := t.TempDir()
	// sh starts a sleep child and waits; SIGTERM ends sh but not the sleep.
	p, err := Start(Spec{Name: "sh", Bin: "/bin/sh", Args: []string{"-c", "trap 'exit 0' TERM; sleep 60 & wait"},
		LogPath: dir + "/sh.log"})
	if err != nil {
		t.Fatal(err)
	}
	var u Usage
	for range 100 {
		if u, err = p.Usage(); err == nil && len(u.Procs) == 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(u.Procs) != 2 || u.RSS <= 0 {
		t.Fatalf("usage = %+v, %v; want sh and its sleep, with RSS", u, err)
	}
	sleepPID := u.Procs[1].PID
	p.Stop(2 * time.Second)
	for range 100 {
		if st, err := procStat(sleepPID); err != nil || st.State == "Z" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("descendant %d still runs after Stop", sleepPID)
}
