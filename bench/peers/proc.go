package peers

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// userHZ is the unit of the CPU times in /proc/PID/stat. The kernel reports them in
// USER_HZ, which is 100 on every Linux architecture's user-space ABI.
const userHZ = 100

// ProcStat is what bench/peers reads from one /proc/PID/stat line.
type ProcStat struct {
	PID, PPID int
	// UTime and STime are the CPU the process (all its threads, live and exited)
	// has used in user and kernel mode, in USER_HZ ticks.
	UTime, STime uint64
	// StartTime is when the process started, in ticks since boot: with the PID it
	// identifies a process even if the PID is later reused.
	StartTime uint64
}

// ParseStat parses the contents of /proc/PID/stat. The command name (field 2) is in
// parentheses and may itself contain spaces and parentheses, so the fields are counted
// from the last ')'.
func ParseStat(data []byte) (ProcStat, error) {
	var st ProcStat
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return st, errors.New("proc stat: no command name in parentheses")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data[:open])))
	if err != nil {
		return st, fmt.Errorf("proc stat: pid: %w", err)
	}
	st.PID = pid
	// rest[0] is field 3 (state), so field k is rest[k-3].
	rest := strings.Fields(string(data[end+1:]))
	const lastField = 22 // starttime
	if len(rest) < lastField-2 {
		return st, fmt.Errorf("proc stat: %d fields after the command name, want at least %d", len(rest), lastField-2)
	}
	field := func(k int) (uint64, error) {
		v, err := strconv.ParseUint(rest[k-3], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc stat: field %d: %w", k, err)
		}
		return v, nil
	}
	ppid, err := field(4)
	if err != nil {
		return st, err
	}
	st.PPID = int(ppid)
	if st.UTime, err = field(14); err != nil {
		return st, err
	}
	if st.STime, err = field(15); err != nil {
		return st, err
	}
	if st.StartTime, err = field(22); err != nil {
		return st, err
	}
	return st, nil
}

// ParseVmRSS returns the resident set size in bytes from the contents of
// /proc/PID/status (the "VmRSS:   1234 kB" line). A kernel thread or a zombie has
// no VmRSS line; that is reported as 0, not an error.
func ParseVmRSS(data []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("proc status: VmRSS line %q: want \"<n> kB\"", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc status: VmRSS: %w", err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("proc status: %w", err)
	}
	return 0, nil
}

// ProcFS reads process information below Root ("/proc" on a live system; a fixture
// directory in tests).
type ProcFS struct{ Root string }

// Usage is the summed memory and CPU of a process tree at one moment.
type Usage struct {
	RSS   int64 // bytes, summed over the processes
	Ticks uint64
	// Procs are the processes counted, the root first.
	Procs []ProcStat
}

// CPUSeconds is the CPU time in Usage, user and system together.
func (u Usage) CPUSeconds() float64 { return float64(u.Ticks) / userHZ }

// Stat reads /proc/PID/stat.
func (fs ProcFS) Stat(pid int) (ProcStat, error) {
	data, err := os.ReadFile(filepath.Join(fs.Root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return ProcStat{}, err
	}
	return ParseStat(data)
}

// Tree returns root and all its descendants, root first then in PID order. It reads
// every process's stat once; processes that exit while it reads are skipped.
func (fs ProcFS) Tree(root int) ([]ProcStat, error) {
	entries, err := os.ReadDir(fs.Root)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", fs.Root, err)
	}
	children := map[int][]ProcStat{}
	var rootStat *ProcStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		st, err := fs.Stat(pid)
		if err != nil {
			continue // exited meanwhile, or not a process directory
		}
		if pid == root {
			rootStat = &st
		}
		children[st.PPID] = append(children[st.PPID], st)
	}
	if rootStat == nil {
		return nil, fmt.Errorf("process %d: not found in %s", root, fs.Root)
	}
	tree := []ProcStat{*rootStat}
	for i := 0; i < len(tree); i++ {
		kids := children[tree[i].PID]
		slices.SortFunc(kids, func(a, b ProcStat) int { return a.PID - b.PID })
		tree = append(tree, kids...)
	}
	return tree, nil
}

// Usage sums RSS and CPU over root's process tree.
func (fs ProcFS) Usage(root int) (Usage, error) {
	tree, err := fs.Tree(root)
	if err != nil {
		return Usage{}, err
	}
	u := Usage{Procs: tree}
	for _, p := range tree {
		data, err := os.ReadFile(filepath.Join(fs.Root, strconv.Itoa(p.PID), "status"))
		if err != nil {
			if p.PID == root {
				return Usage{}, fmt.Errorf("process %d: %w", root, err)
			}
			continue // a child that just exited
		}
		rss, err := ParseVmRSS(data)
		if err != nil {
			return Usage{}, fmt.Errorf("process %d: %w", p.PID, err)
		}
		u.RSS += rss
		u.Ticks += p.UTime + p.STime
	}
	return u, nil
}

// ParseMachineCPU reads the first line of /proc/stat ("cpu  user nice system idle
// iowait irq softirq steal guest guest_nice") and returns the ticks the machine's
// CPUs spent running tasks since boot: user, nice, system and steal. Idle and iowait
// are not busy; guest time is already in user and nice; interrupt time is left out
// because the benchmark's own loopback packets are processed there, and it is not
// charged to any process, so it would be mistaken for other jobs.
func ParseMachineCPU(data []byte) (busy uint64, err error) {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, fmt.Errorf("proc stat: first line %.40q is not the cpu total", line)
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc stat: cpu field %d: %w", i+1, err)
		}
		switch i {
		case 3, 4, 5, 6, 8, 9: // idle, iowait, irq, softirq, guest, guest_nice
		default:
			busy += v
		}
	}
	return busy, nil
}

// MachineBusy is the ticks the whole machine's CPUs ran tasks since boot.
func (fs ProcFS) MachineBusy() (uint64, error) {
	data, err := os.ReadFile(filepath.Join(fs.Root, "stat"))
	if err != nil {
		return 0, err
	}
	return ParseMachineCPU(data)
}
