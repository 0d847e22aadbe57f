# posgate — the two commands that matter on a fresh Debian machine (as root):
#   make demo   runs the main job end to end on embedded defaults (arrives with store-server)
#   make test   installs what the tests need and runs the whole suite with the race detector

GO        ?= go
PKGS      ?= ./...
TESTFLAGS ?= -race -count=1 -timeout 14m
BENCHTIME ?= 1x
APT_PKGS  := redis-server redis-sentinel redis-tools mosquitto postgresql sqlite3 nodejs chromium chromium-driver
BINS      := terminal-agent store-server hq-sync

.PHONY: all build deps demo test test-short vet fmt bench fuzz clean

all: build

build:
	mkdir -p bin
	for b in $(BINS); do $(GO) build -o bin/$$b ./$$b || exit 1; done
	$(GO) build -o bin/posgate-demo ./demo

# demo runs one store end to end (Redis Sentinel trio, store-server on its embedded broker,
# three terminal-agents, a cashier load, a terminal offline, a Redis master killed) and ends
# with PASS or FAIL on the invariants.
demo: deps build
	bin/posgate-demo --bin bin --duration $(or $(DURATION),20s)

# deps installs the real servers the tests talk to (never mocked); a no-op when present.
deps:
	@missing=""; \
	for b in redis-server redis-sentinel redis-cli redis-benchmark mosquitto node chromium chromedriver; do \
		command -v $$b >/dev/null 2>&1 || [ -x /usr/sbin/$$b ] || missing="$$missing $$b"; \
	done; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" != 0 ]; then echo "run as root (apt-get install -y $(APT_PKGS))"; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PKGS) >/dev/null; \
	fi
	@# Debian starts the packaged services on their default ports; the tests use their own.
	-@systemctl disable --now redis-server redis-sentinel mosquitto postgresql >/dev/null 2>&1 || true

vet:
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (gofmt -l . ; echo "gofmt needed"; exit 1)

test: deps vet
	$(GO) test $(TESTFLAGS) $(PKGS)

test-short:
	$(GO) test -short -count=1 $(PKGS)

# bench runs the benchmarks (real servers, minutes); results go to docs/benchmarks.md by hand.
bench: deps
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 60m $(PKGS)

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeUp -fuzztime 30s ./internal/wire/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./internal/money/
	$(GO) test -run '^$$' -fuzz FuzzDecodeBatchLikeEncodingJSON -fuzztime 30s ./hq-sync/serve/

clean:
	rm -rf bin
