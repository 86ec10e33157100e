// Command handover measures what a SO_REUSEPORT hand-over loses when the old
// process stops listening: a flood of short connections (TCP connect,
// GET /health, read the answer) runs against one port while, round after
// round, a new gateway process starts on it and the old one gets SIGTERM
// (DRAIN_GRACE_SECS=0, so its listener closes while the flood is at full
// rate). Every failed request is counted by cause. Everything runs on
// loopback; the processes are stopped by PID.
//
//	go run ./bench/scaleout/handover -gateway bin/gateway -rounds 20 -c 32
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	gw := flag.String("gateway", "bin/gateway", "gateway binary")
	rounds := flag.Int("rounds", 20, "hand-overs")
	workers := flag.Int("c", 32, "concurrent connecting clients")
	port := flag.Int("port", 4391, "shared port")
	flag.Parse()
	addr := "127.0.0.1:" + strconv.Itoa(*port)
	migrate, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_migrate_req")

	start := func(i int) *exec.Cmd {
		cmd := exec.Command(*gw)
		cmd.Env = append(os.Environ(), "REUSEPORT=1", "PORT="+strconv.Itoa(*port), "ADMIN_ADDR=",
			"LITELLM_MASTER_KEY=k", "OPENAI_API_BASE=ws://127.0.0.1:1/v1", "REALTIME_POOL_SIZE=0",
			"DRAIN_GRACE_SECS=0", "DRAIN_TIMEOUT=5", "LOG_LEVEL=info")
		logs, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// Listening once it says so; the rest of its log is discarded.
		sc := bufio.NewScanner(logs)
		for sc.Scan() && !strings.Contains(sc.Text(), "gateway listening") {
		}
		go func() { _, _ = io.Copy(io.Discard, logs) }()
		return cmd
	}
	old := start(0)
	var ok atomic.Int64
	var mu sync.Mutex
	causes := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 10_000_000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := probe(addr); err != nil {
					mu.Lock()
					causes[cause(err)]++
					mu.Unlock()
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	t0 := time.Now()
	for r := 1; r <= *rounds; r++ {
		next := start(r)
		_ = old.Process.Signal(syscall.SIGTERM)
		if err := old.Wait(); err != nil {
			fmt.Fprintf(os.Stderr, "round %d: the old process exited with %v\n", r, err)
		}
		old = next
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	_ = old.Process.Kill()
	_ = old.Wait()
	failed := 0
	keys := make([]string, 0, len(causes))
	for k, n := range causes {
		failed += n
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Printf("tcp_migrate_req=%s rounds=%d clients=%d requests=%d (%.0f/s) failed=%d (%.2f per hand-over)\n",
		string(migrate[:len(migrate)-1]), *rounds, *workers, ok.Load()+int64(failed),
		float64(ok.Load()+int64(failed))/time.Since(t0).Seconds(), failed, float64(failed)/float64(*rounds))
	for _, k := range keys {
		fmt.Printf("  %s: %d\n", k, causes[k])
	}
}

// probe is one short connection: connect, GET /health, read the status line.
func probe(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func cause(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	default:
		return err.Error()
	}
}
