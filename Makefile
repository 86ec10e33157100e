# rtgate: a netpoll WebSocket gateway for OpenAI's Realtime API.
#
#   make bench   the main job: direct vs gateway (pool off, pool on) against mockai
#   make soak    ~3 minutes under random faults; fails on any unexplained failure or leak (not in CI)
#   make bench-peers  nginx, HAProxy and Caddy vs the gateway in front of mockai
#   make test    vet and the race-enabled test suite (what CI runs)
#   make run     the gateway in front of a local mockai until Ctrl-C
#   make fuzz    each fuzz target for FUZZTIME (default 60s)
#   make build   binaries into bin/
#   make screenshots  docs/status.png, docs/status-phone.png, docs/playground.png from headless Chromium

GO       ?= go
BIN      := bin
MOCK_ADDR ?= 127.0.0.1:8089
BENCH_ARGS ?=
SOAK_DURATION ?= 3m
SOAK_ARGS ?=
PEERS_ARGS ?=

.PHONY: all build test vet run bench bench-peers soak clean screenshots

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

vet:
	$(GO) vet ./...

test: vet
	$(GO) test -race -timeout 10m ./...

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

bench: build
	$(BIN)/wsbench compare -mockai $(BIN)/mockai -gateway $(BIN)/gateway $(BENCH_ARGS)

# The peer comparison (bench/peers): nginx, HAProxy and Caddy as plain ws:// proxies,
# direct, and the gateway with the pool off and on, same load; 10-20 minutes (it waits
# for other jobs on the machine to finish before each system).
# Needs the nginx, haproxy and caddy packages. PEERS_ARGS=-quick is a small check.
bench-peers:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/gateway ./cmd/mockai
	$(GO) run ./bench/peers/cmd/benchpeers -mockai $(BIN)/mockai -gateway $(BIN)/gateway $(PEERS_ARGS)

# Sessions with injected faults (upstream drops, stalls, 401s, slow and garbage
# clients) alongside normal ones; every failure must be one it injected, and the
# gateway's memory, goroutines and fds must come back. Summary on stdout, files in
# bench/results/soak-<timestamp>/. Longer: make soak SOAK_DURATION=30m.
soak: build
	$(BIN)/wsbench soak -mockai $(BIN)/mockai -gateway $(BIN)/gateway -duration $(SOAK_DURATION) $(SOAK_ARGS)

# Each fuzz target for FUZZTIME (not part of make test); failing inputs land in
# <pkg>/testdata/fuzz/<Target>/ and then run as regression tests in make test.
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzScanner$$' -fuzztime $(FUZZTIME) ./frames/
	$(GO) test -run '^$$' -fuzz '^FuzzParseHeader$$' -fuzztime $(FUZZTIME) ./frames/
	$(GO) test -run '^$$' -fuzz '^FuzzHandshake$$' -fuzztime $(FUZZTIME) ./server/
	$(GO) test -run '^$$' -fuzz '^FuzzEventType$$' -fuzztime $(FUZZTIME) ./server/

clean:
	rm -rf $(BIN)

# The README's screenshots of the admin pages, taken from the real pages by the
# browser tests (headless Chromium, apt-get install -y chromium).
screenshots:
	$(GO) test -count=1 -run '^(TestStatusPageShowsLiveSessionsInChromium|TestPlaygroundStreamsMicrophoneInChromium)$$/^ws$$' \
		./server -args -screenshots=$(CURDIR)/docs
