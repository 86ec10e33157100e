package deploy

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"rtgate/server"
)

// Measured 2026-12-01 on the 2-core shared dev box: two REUSEPORT processes
// holding 14,000 idle sessions (pool off, bench/scaleout/procs.sh) at 114 +
// 113 MiB RSS with a ws:// upstream (16.6 KiB a session) and 254 + 257 MiB
// with a wss:// one (37.4 KiB: the upstream's TLS state); about 12 MiB idle.
const (
	rssPerSession    = 16.6 * 1024
	rssPerTLSSession = 37.4 * 1024
	idleRSS          = 12 << 20
	// Drain's own shutdown after the close handshakes.
	shutdownSlack = 3 * time.Second
)

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// documents splits a multi-document YAML file.
func documents(b []byte) [][]byte {
	var out [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(d) != "" {
			out = append(out, []byte(d))
		}
	}
	return out
}

// strict decodes one document into v, rejecting unknown or duplicate fields.
func strict(doc []byte, v any) error { return yaml.UnmarshalStrict(doc, v) }

type manifests struct {
	dep *appsv1.Deployment
	svc *corev1.Service
	pdb *policyv1.PodDisruptionBudget
	hpa *autoscalingv2.HorizontalPodAutoscaler
}

func decodeManifests(b []byte) (manifests, error) {
	var m manifests
	for i, doc := range documents(b) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return m, fmt.Errorf("document %d: %w", i, err)
		}
		var v any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			m.dep = &appsv1.Deployment{}
			v = m.dep
		case "v1 Service":
			m.svc = &corev1.Service{}
			v = m.svc
		case "policy/v1 PodDisruptionBudget":
			m.pdb = &policyv1.PodDisruptionBudget{}
			v = m.pdb
		case "autoscaling/v2 HorizontalPodAutoscaler":
			m.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
			v = m.hpa
		default:
			return m, fmt.Errorf("document %d: unexpected %s %s", i, tm.APIVersion, tm.Kind)
		}
		if err := strict(doc, v); err != nil {
			return m, fmt.Errorf("document %d (%s): %w", i, tm.Kind, err)
		}
	}
	if m.dep == nil || m.svc == nil || m.pdb == nil || m.hpa == nil {
		return m, fmt.Errorf("want a Deployment, Service, PodDisruptionBudget and HorizontalPodAutoscaler")
	}
	return m, nil
}

// gatewayConfig parses env the way the gateway does, and returns the names
// it does not read.
func gatewayConfig(t *testing.T, env map[string]string) (server.Settings, []string) {
	t.Helper()
	read := map[string]bool{}
	cfg, err := server.FromEnv(func(name string) (string, bool) {
		read[name] = true
		v, ok := env[name]
		return v, ok
	})
	if err != nil {
		t.Fatalf("the gateway refuses these settings: %v", err)
	}
	var unknown []string
	for name := range env {
		if !read[name] && !strings.HasPrefix(name, "GO") {
			unknown = append(unknown, name)
		}
	}
	return cfg, unknown
}

func TestKubernetesManifests(t *testing.T) {
	m, err := decodeManifests(readFile(t, "k8s/gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pod := m.dep.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "secret-" + strings.ToLower(e.Name)
			if e.Name == "REDIS_URL" {
				env[e.Name] = "redis://redis:6379/0"
			}
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		default:
			t.Fatalf("env %s: only values and secrets are expected", e.Name)
		}
	}
	for _, secret := range []string{"LITELLM_MASTER_KEY", "OPENAI_API_KEY", "REDIS_URL"} {
		for _, e := range c.Env {
			if e.Name == secret && e.ValueFrom == nil {
				t.Fatalf("%s must come from a Secret, not a literal", secret)
			}
		}
	}
	cfg, unknown := gatewayConfig(t, env)
	if len(unknown) > 0 {
		t.Fatalf("settings the gateway does not read: %v", unknown)
	}

	port := func(name string) int32 {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		t.Fatalf("no container port named %q", name)
		return 0
	}
	if int(port("realtime")) != cfg.Port {
		t.Fatalf("container port %d, gateway PORT %d", port("realtime"), cfg.Port)
	}
	if !strings.HasSuffix(cfg.AdminAddr, ":"+strconv.Itoa(int(port("admin")))) || cfg.Host != "0.0.0.0" {
		t.Fatalf("ADMIN_ADDR %q / HOST %q do not match the admin port %d on all interfaces", cfg.AdminAddr, cfg.Host, port("admin"))
	}

	rp := c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/health" || rp.HTTPGet.Port.String() != "realtime" {
		t.Fatalf("readiness must be GET /health on the client port, got %+v", rp)
	}
	// The probe must see the 503 well inside the grace.
	if notice := time.Duration(rp.PeriodSeconds*rp.FailureThreshold) * time.Second; notice > cfg.DrainGrace/2 {
		t.Fatalf("readiness notices a drain after %v, DRAIN_GRACE_SECS is %v", notice, cfg.DrainGrace)
	}
	// A new pod starts from its share of the pods' remembered demand (REDIS_URL)
	// and its readiness (/health) is 503 warming until its pool is warm; the
	// rolling update must wait that out rather than give up on the pod.
	if !cfg.Pool.Auto || cfg.RedisURL == "" || cfg.Pool.WarmupBound <= 0 {
		t.Fatal("want REALTIME_POOL_SIZE=auto, REDIS_URL and POOL_WARMUP_SECS: new pods start warm and are ready once warm")
	}
	progress := 600 * time.Second // Kubernetes' default progressDeadlineSeconds
	if d := m.dep.Spec.ProgressDeadlineSeconds; d != nil {
		progress = time.Duration(*d) * time.Second
	}
	if progress < 10*cfg.Pool.WarmupBound {
		t.Fatalf("progressDeadlineSeconds %v leaves no room for POOL_WARMUP_SECS %v per pod", progress, cfg.Pool.WarmupBound)
	}
	if lp := c.LivenessProbe; lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Port.String() != "admin" {
		t.Fatalf("liveness must use the admin port (the client listener stops during a drain), got %+v", lp)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatal("want a preStop sleep")
	}
	preStop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	if preStop < cfg.DrainGrace {
		t.Fatalf("preStop sleeps %v, less than DRAIN_GRACE_SECS %v", preStop, cfg.DrainGrace)
	}
	need := preStop + cfg.DrainGrace + cfg.DrainTimeout + cfg.CloseTimeout + shutdownSlack
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < need {
		t.Fatalf("terminationGracePeriodSeconds must be at least %v (preStop + grace + DRAIN_TIMEOUT + CLOSE_TIMEOUT_SECS + shutdown)", need)
	}

	memReq := c.Resources.Requests[corev1.ResourceMemory]
	memLim := c.Resources.Limits[corev1.ResourceMemory]
	perSession := rssPerSession
	if cfg.APIBase.Scheme == "wss" {
		perSession = rssPerTLSSession
	}
	wantMem := int64(float64(cfg.MaxConnections)*perSession) + idleRSS
	if memReq.Value() < wantMem {
		t.Fatalf("memory request %s is under MAX_CONNECTIONS %d x %.1f KiB (%s upstream) + idle = %d MiB",
			memReq.String(), cfg.MaxConnections, perSession/1024, cfg.APIBase.Scheme, wantMem>>20)
	}
	goMem, err := resource.ParseQuantity(strings.TrimSuffix(env["GOMEMLIMIT"], "B"))
	if err != nil || memLim.IsZero() || goMem.Cmp(memLim) >= 0 || goMem.Value() < memReq.Value() {
		t.Fatalf("GOMEMLIMIT %q must lie between the memory request %s and limit %s", env["GOMEMLIMIT"], memReq.String(), memLim.String())
	}
	if c.Resources.Requests.Cpu().IsZero() {
		t.Fatal("the HPA scales on CPU: the container needs a CPU request")
	}
	if ru := m.dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Fatal("rolling updates must add a pod before taking one away (maxUnavailable 0)")
	}
	sc := c.SecurityContext
	if ps := pod.Spec.SecurityContext; ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot ||
		sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Fatal("the pod must run as non-root with a read-only root filesystem")
	}

	labels := pod.Labels
	sameLabels := func(what string, sel map[string]string) {
		t.Helper()
		if len(sel) == 0 {
			t.Fatalf("%s has an empty selector", what)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Fatalf("%s selects %s=%s, the pods have %v", what, k, v, labels)
			}
		}
	}
	sameLabels("the Deployment", m.dep.Spec.Selector.MatchLabels)
	sameLabels("the Service", m.svc.Spec.Selector)
	sameLabels("the PodDisruptionBudget", m.pdb.Spec.Selector.MatchLabels)
	if len(m.svc.Spec.Ports) != 1 || m.svc.Spec.Ports[0].TargetPort.String() != "realtime" {
		t.Fatalf("the Service must target the realtime port, got %+v", m.svc.Spec.Ports)
	}
	if mu := m.pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Fatal("the PodDisruptionBudget should let one pod drain at a time")
	}

	h := m.hpa.Spec
	if h.ScaleTargetRef.Kind != "Deployment" || h.ScaleTargetRef.Name != m.dep.Name {
		t.Fatalf("the HPA scales %s/%s, not the Deployment %s", h.ScaleTargetRef.Kind, h.ScaleTargetRef.Name, m.dep.Name)
	}
	if len(h.Metrics) != 1 || h.Metrics[0].Resource == nil || h.Metrics[0].Resource.Name != corev1.ResourceCPU {
		t.Fatalf("the HPA must scale on CPU, got %+v", h.Metrics)
	}
	// While Redis is down each pod admits its share of the live pods it
	// learned from Redis, and never more than limit / CLUSTER_INSTANCES:
	// the bound matches the minimum size.
	if h.MinReplicas == nil || int(*h.MinReplicas) != cfg.ClusterInstances || *m.dep.Spec.Replicas != *h.MinReplicas {
		t.Fatalf("CLUSTER_INSTANCES %d, replicas %d and the HPA's minReplicas %v should agree", cfg.ClusterInstances, *m.dep.Spec.Replicas, h.MinReplicas)
	}
}

// TestStrictDecodingRejectsUnknownFields: the check above would notice a
// misspelt field (which the API server would otherwise drop in silence).
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	b := bytes.Replace(readFile(t, "k8s/gateway.yaml"), []byte("readinessProbe:"), []byte("readinesProbe:"), 1)
	if _, err := decodeManifests(b); err == nil || !strings.Contains(err.Error(), "readinesProbe") {
		t.Fatalf("a misspelt field decoded without error: %v", err)
	}
}

// unitSettings reads Key=Value lines of a systemd unit's [Service] section;
// Environment= lines go to env.
func unitSettings(t *testing.T, b []byte) (map[string]string, map[string]string) {
	t.Helper()
	settings, env := map[string]string{}, map[string]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("unit line %q", line)
			}
			if k == "Environment" {
				ek, ev, _ := strings.Cut(v, "=")
				env[ek] = ev
			} else {
				settings[k] = v
			}
		}
	}
	return settings, env
}

func sysctls(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("sysctl line %q", line)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out
}

func TestSystemdUnitAndSysctls(t *testing.T) {
	settings, env := unitSettings(t, readFile(t, "systemd/rtgate@.service"))
	env["ADMIN_ADDR"] = strings.ReplaceAll(env["ADMIN_ADDR"], "%i", "1")
	cfg, unknown := gatewayConfig(t, env)
	if len(unknown) > 0 {
		t.Fatalf("settings the gateway does not read: %v", unknown)
	}
	if !cfg.ReusePort {
		t.Fatal("unit instances share the port: REUSEPORT=1")
	}
	// The pool state must be where the dynamic user may write under
	// ProtectSystem=strict: its StateDirectory.
	if dir := settings["StateDirectory"]; dir == "" || filepath.Dir(cfg.PoolState) != filepath.Join("/var/lib", dir) {
		t.Fatalf("REALTIME_POOL_STATE %q is not in the unit's StateDirectory %q", cfg.PoolState, dir)
	}
	stop, err := strconv.Atoi(settings["TimeoutStopSec"])
	if need := cfg.DrainGrace + cfg.DrainTimeout + cfg.CloseTimeout + shutdownSlack; err != nil || time.Duration(stop)*time.Second < need {
		t.Fatalf("TimeoutStopSec=%s, the drain needs %v", settings["TimeoutStopSec"], need)
	}
	if settings["KillSignal"] != "SIGTERM" || (settings["Restart"] != "always" && settings["Restart"] != "on-failure") {
		t.Fatalf("KillSignal=%s Restart=%s", settings["KillSignal"], settings["Restart"])
	}
	nofile, err := strconv.Atoi(settings["LimitNOFILE"])
	if err != nil || nofile < 2*100000 {
		t.Fatalf("LimitNOFILE=%s", settings["LimitNOFILE"])
	}

	sys := sysctls(t, readFile(t, "systemd/60-rtgate.conf"))
	nrOpen, _ := strconv.Atoi(sys["fs.nr_open"])
	if nrOpen < nofile {
		t.Fatalf("fs.nr_open %d is below LimitNOFILE %d: the unit would not start", nrOpen, nofile)
	}
	for _, k := range []string{"net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog", "net.ipv4.ip_local_port_range",
		"net.ipv4.tcp_tw_reuse", "net.ipv4.tcp_migrate_req", "net.ipv4.ip_local_reserved_ports"} {
		if sys[k] == "" {
			t.Fatalf("the sysctl drop-in lacks %s", k)
		}
	}
	if !strings.Contains(sys["net.ipv4.ip_local_reserved_ports"], strconv.Itoa(server.Defaults().Port)) {
		t.Fatal("with the ephemeral range widened, the gateway's port must be reserved")
	}
}

func TestHAProxyConfig(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatalf("haproxy is not installed (apt-get install -y haproxy; .ci/run does it): %v", err)
	}
	if out, err := exec.Command(bin, "-c", "-f", "haproxy/haproxy.cfg").CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	b := string(readFile(t, "haproxy/haproxy.cfg"))
	if !strings.Contains(b, "http-check send meth GET uri /health") || !strings.Contains(b, "mode tcp") {
		t.Fatal("want TCP mode with an HTTP check of /health")
	}
	m := regexp.MustCompile(`default-server inter (\d+)s fall (\d+)`).FindStringSubmatch(b)
	if m == nil {
		t.Fatal("no default-server inter/fall")
	}
	inter, _ := strconv.Atoi(m[1])
	fall, _ := strconv.Atoi(m[2])
	if notice := time.Duration(inter*fall) * time.Second; notice >= server.Defaults().DrainGrace {
		t.Fatalf("HAProxy notices a drain after %v, not inside DRAIN_GRACE_SECS' default %v", notice, server.Defaults().DrainGrace)
	}
	if strings.Contains(b, "on-marked-down shutdown-sessions") {
		t.Fatal("HAProxy must not cut live sessions of a draining instance")
	}
}

func TestDockerfile(t *testing.T) {
	b := string(readFile(t, "Dockerfile"))
	if strings.Count(b, "\nFROM ") < 2 || !strings.Contains(b, "CGO_ENABLED=0") || !strings.Contains(b, "USER 65532") {
		t.Fatal("want a multi-stage build of a static binary, run as a non-root user")
	}
	// What the image's build step does, here: a static binary.
	out := t.TempDir() + "/gateway"
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "rtgate/cmd/gateway")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, b)
	}
	f, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(f, []byte("/lib64/ld-linux")) {
		t.Fatal("the binary needs a dynamic loader: not static")
	}
}
