# rtgate: a netpoll WebSocket gateway for OpenAI's Realtime API.
#
#   make bench   the main job: direct vs gateway (pool off, pool on) against mockai over wss://,
#                closed-loop runs, then an open-loop steady-state run per leg; then GPT-Live
#                (bench-live), Gemini Live (bench-gemini) and the conversation record and
#                guardrails (bench-guardrails)
#   make soak    ~3 minutes under random faults; fails on any unexplained failure or leak (not in CI)
#   make bench-peers  nginx and HAProxy vs the gateway in front of mockai, wss:// and ws:// upstream
#   make bench-huge   100,000 idle sessions over 12 gateway processes on one port (HUGE_ARGS="-n 2000" for fewer)
#   make redis-latency  the shared limits' Redis call on this box, idle and with two CPU burners (REDIS_TIMEOUT_MS's default)
#   make test    vet and the race-enabled test suite (what CI runs)
#   make run     the gateway in front of a local mockai until Ctrl-C
#   make fuzz    each fuzz target for FUZZTIME (default 60s)
#   make build   binaries into bin/
#   make docs    the settings tables of docs/configuration.md and docs/operations.md, from server.SettingsTable
#   make screenshots  docs/status.png, docs/status-phone.png, docs/playground.png from headless Chromium

GO       ?= go
BIN      := bin
MOCK_ADDR ?= 127.0.0.1:8089
BENCH_ARGS ?=
SOAK_DURATION ?= 3m
SOAK_ARGS ?=
PEERS_ARGS ?=
HUGE_ARGS ?=
GEMINI_ARGS ?=
GUARDRAILS_ARGS ?=
REDISLAT_ARGS ?=

.PHONY: all build test vet run bench bench-live bench-gemini bench-guardrails bench-peers bench-huge soak redis-latency clean screenshots docs

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

vet:
	$(GO) vet ./...

# The pages' settings tables are written from the table FromEnv reads
# (server.SettingsTable); TestSettingsPagesMatchTheTable fails until this runs.
docs:
	$(GO) run ./cmd/settingsdoc

# The suite runs with the race detector. The reactor's and the server's
# suites run twice, once under each of netpoll's runners: inline (the
# gateway's default, handlers on the poller) and pool (a goroutine per read
# event). -count=1 there: TestMain reads POLLER_HANDLERS before the test cache
# records environment reads, so a cached pass of one runner would otherwise
# stand for the other. cmd/gateway's TestHandlersRelayEveryByte runs the
# binary under both. The two runners' suites run side by side, each output
# printed whole once both end: the server suite spends most of its time
# waiting (about a third of one core on the 2-core CI box), so together they
# take about the time of one (400 s instead of 800 s on 2026-12-04). Each
# suite's bound is 15 minutes: on 2026-12-06 the server suite came within
# seconds of 10 under other load on the 2-core box.
BOTH_RUNNERS := rtgate/poller rtgate/server
test: vet
	$(GO) test -race -timeout 10m $$($(GO) list ./... | grep -v -x $(addprefix -e ,$(BOTH_RUNNERS)))
	@d=$$(mktemp -d); \
	for r in inline pool; do \
		(POLLER_HANDLERS=$$r $(GO) test -race -count=1 -timeout 15m $(BOTH_RUNNERS) >$$d/$$r 2>&1; echo $$? >$$d/$$r.rc) & \
	done; wait; rc=0; \
	for r in inline pool; do \
		echo "POLLER_HANDLERS=$$r $(GO) test -race -count=1 -timeout 15m $(BOTH_RUNNERS)"; cat $$d/$$r; \
		[ "$$(cat $$d/$$r.rc)" = 0 ] || rc=1; \
	done; rm -rf $$d; exit $$rc

# The gateway on 127.0.0.1:4001 in front of mockai; client key sk-local.
run: build
	@set -e; \
	$(BIN)/mockai -addr $(MOCK_ADDR) & mock=$$!; \
	trap 'kill $$mock 2>/dev/null' EXIT INT TERM; \
	sleep 0.3; \
	echo "gateway: ws://127.0.0.1:4001/v1/realtime?model=gpt-realtime  (Authorization: Bearer sk-local)"; \
	echo "status:  http://127.0.0.1:4002/status   playground: http://127.0.0.1:4002/playground"; \
	LITELLM_MASTER_KEY=sk-local OPENAI_API_KEY=sk-mock OPENAI_API_BASE=ws://$(MOCK_ADDR)/v1 \
		$(BIN)/gateway

# mockai serves wss:// (the gateway trusts its certificate through UPSTREAM_CA_FILE),
# as OpenAI does; BENCH_ARGS="-upstream plain" for a plain ws:// upstream.
# make bench INSTANCES=10: ten gateways behind a real HAProxy (installed when
# missing), 5,000 calls / 500 concurrent, pool auto and a fixed pool of 500/10.
INSTANCES ?= 1
bench: build
	@[ "$(INSTANCES)" = 1 ] || command -v haproxy >/dev/null || \
		{ apt-get update -q && apt-get install -y -q haproxy; }
	$(BIN)/wsbench compare -mockai $(BIN)/mockai -gateway $(BIN)/gateway -instances $(INSTANCES) $(BENCH_ARGS)
	@[ "$(INSTANCES)" != 1 ] || $(MAKE) --no-print-directory bench-live BENCH_ARGS="$(filter-out -restart,$(BENCH_ARGS))"
	@[ "$(INSTANCES)" != 1 ] || $(MAKE) --no-print-directory bench-gemini
	@[ "$(INSTANCES)" != 1 ] || $(MAKE) --no-print-directory bench-guardrails

# GPT-Live beside it (make bench runs it after Realtime, one instance, without
# -restart, which the Live legs do not take): the same legs with Live calls
# (/v1/live/sessions), the pool-on leg with LIVE_POOL_SIZE (= -c unless -live-pool N).
bench-live: build
	$(BIN)/wsbench compare -protocol live -mockai $(BIN)/mockai -gateway $(BIN)/gateway $(BENCH_ARGS)

# Gemini Live beside them (make bench runs it after bench-live, one instance): a Gemini Live
# client straight to mockai's Gemini endpoint, the gateway translating the Realtime API to a
# gemini/ deployment on that mockai, and the Realtime pool-off leg, the same calls each
# (300 x 3 turns, 150 concurrent, about 40 s); it prints the gateway's CPU per turn translated
# vs verbatim as a ratio. No pool-on leg: the gateway never warms Gemini sockets. It takes only
# the upstream from BENCH_ARGS (-upstream plain); GEMINI_ARGS="-n 600 -turns 5" for the rest.
GEMINI_UPSTREAM = $(if $(filter plain -upstream=plain --upstream=plain,$(BENCH_ARGS)),-upstream plain)
bench-gemini: build
	$(BIN)/wsbench compare -protocol gemini -mockai $(BIN)/mockai -gateway $(BIN)/gateway $(GEMINI_UPSTREAM) $(GEMINI_ARGS)

# The conversation record and each guardrail mode (make bench runs it after bench-gemini, one
# instance; issue 36): a gateway with neither (pool-off), with log_transcripts (record), with a
# litellm_content_filter guardrail in realtime_input_transcription (input), in
# realtime_output_transcription (output) or in realtime_tool_call (tool, set against tool-none: the
# same tool-calling calls without it), the same calls each (300 x 3 turns, 150 concurrent, about
# a minute and a half); it prints each leg's gateway CPU per turn, RSS per session and first-audio
# p50/p95 against pool-off's, from the same run. Over plain ws:// unless GUARDRAILS_ARGS="-upstream
# tls" (the guardrails' cost is the gateway reading events, which TLS to the upstream does not
# change); GUARDRAILS_ARGS="-n 600 -turns 5" for more.
bench-guardrails: build
	$(BIN)/wsbench compare -protocol guardrails -mockai $(BIN)/mockai -gateway $(BIN)/gateway $(GUARDRAILS_ARGS)

# The peer comparison (bench/peers, `wsbench peers`): nginx and HAProxy as WebSocket
# proxies, direct, and the gateway with the pool off and on, same load, first over a
# wss:// upstream, then over plain ws:// (PEERS_ARGS="-upstream plain" for one);
# 20-40 minutes (it waits for other jobs on the machine to finish before each system).
# Installs nginx and haproxy when missing (caddy too is measured with -systems ...,caddy).
# A full run writes its table into docs/benchmarks/peers.md between the wsbench peers markers.
# PEERS_ARGS=-quick is a small check (never written into the page).
bench-peers: build
	@command -v nginx >/dev/null && command -v haproxy >/dev/null || \
		{ apt-get update -q && apt-get install -y -q nginx haproxy; }
	$(BIN)/wsbench peers -mockai $(BIN)/mockai -gateway $(BIN)/gateway -readme docs/benchmarks/peers.md $(PEERS_ARGS)

# Many idle sessions on one host (bench/huge, `wsbench huge`): 12 gateway processes
# sharing one port (REUSEPORT=1), enough mockai and `wsbench -hold` client processes
# to stay under the open-file limit; prints sessions held, gateway memory per session,
# the establishment rate and each role's CPU. Needs a quiet machine for its figures;
# HUGE_ARGS="-n 2000" is a small check. Files in bench/results/huge-<timestamp>/.
bench-huge: build
	$(BIN)/wsbench huge -mockai $(BIN)/mockai -gateway $(BIN)/gateway $(HUGE_ARGS)

# Sessions with injected faults (upstream drops, stalls, 401s, slow and garbage
# clients) alongside normal ones; every failure must be one it injected, and the
# gateway's memory, goroutines and fds must come back. Summary on stdout, files in
# bench/results/soak-<timestamp>/. Longer: make soak SOAK_DURATION=30m.
soak: build
	$(BIN)/wsbench soak -mockai $(BIN)/mockai -gateway $(BIN)/gateway -duration $(SOAK_DURATION) $(SOAK_ARGS)

# The round trip of the shared limits' admission script against a local
# redis-server (bench/redislat), 20,000 admissions idle and again with two CPU
# burners on the box: p50, p99, p99.9 and how many exceed 5-50 ms. The
# default REDIS_TIMEOUT_MS sits above the busy run's p99.9 (docs/operations.md,
# "Limits and timeouts"). Needs redis-server.
redis-latency: build
	$(BIN)/wsbench redis-latency $(REDISLAT_ARGS)

# Each fuzz target for FUZZTIME (not part of make test); failing inputs land in
# <pkg>/testdata/fuzz/<Target>/ and then run as regression tests in make test.
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzScanner$$' -fuzztime $(FUZZTIME) ./frames/
	$(GO) test -run '^$$' -fuzz '^FuzzParseHeader$$' -fuzztime $(FUZZTIME) ./frames/
	$(GO) test -run '^$$' -fuzz '^FuzzHandshake$$' -fuzztime $(FUZZTIME) ./server/frontdoor/
	$(GO) test -run '^$$' -fuzz '^FuzzOf$$' -fuzztime $(FUZZTIME) ./server/eventtype/
	$(GO) test -run '^$$' -fuzz '^FuzzTranslate$$' -fuzztime $(FUZZTIME) ./server/providers/gemini/

clean:
	rm -rf $(BIN)

# The admin pages' screenshots in docs/ (docs/operations.md), taken from the real pages by the
# browser tests (headless Chromium, apt-get install -y chromium).
screenshots:
	$(GO) test -count=1 -run '^(TestStatusPageShowsLiveSessionsInChromium|TestPlaygroundStreamsMicrophoneInChromium)$$/^ws$$' \
		./server -args -screenshots=$(CURDIR)/docs
