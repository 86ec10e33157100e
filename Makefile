# rtgate: a netpoll WebSocket gateway for OpenAI's Realtime API.
#
#   make bench   the main job: direct vs gateway (pool off, pool on) against mockai
#   make test    vet and the race-enabled test suite (what CI runs)
#   make run     the gateway in front of a local mockai until Ctrl-C
#   make build   binaries into bin/

GO       ?= go
BIN      := bin
MOCK_ADDR ?= 127.0.0.1:8089
BENCH_ARGS ?=

.PHONY: all build test vet run bench clean

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
	LITELLM_MASTER_KEY=sk-local OPENAI_API_KEY=sk-mock OPENAI_API_BASE=ws://$(MOCK_ADDR)/v1 \
		$(BIN)/gateway

bench: build
	$(BIN)/wsbench compare -mockai $(BIN)/mockai -gateway $(BIN)/gateway $(BENCH_ARGS)

clean:
	rm -rf $(BIN)
