# posgate — the two commands that matter on a fresh Debian machine (as root):
#   make demo   runs the main job end to end on embedded defaults (arrives with store-server)
#   make test   installs what the tests need and runs the whole suite with the race detector

GO        ?= go
PKGS      ?= ./...
TESTFLAGS ?= -race -count=1 -timeout 14m
BENCHTIME ?= 1x
APT_PKGS  := redis-server redis-sentinel redis-tools mosquitto postgresql sqlite3 nodejs chromium chromium-driver
BINS      := terminal-agent store-server hq-sync
# SEED draws the randomized fault suite's schedule (e2e/chaos): a fresh one each run unless
# given; MINUTES is how long `make chaos` injects faults.
SEED      ?= $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
SEED      := $(SEED)
MINUTES   ?= 10

.PHONY: all build deps demo test test-short vet fmt bench chaos fuzz clean

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

# test runs every test, the fault suite's short schedule (1 minute) with a fresh seed among them.
test: deps vet
	@echo "fault suite seed $(SEED) (rerun it: make chaos SEED=$(SEED) MINUTES=1)"
	CHAOS_SEED=$(SEED) $(GO) test $(TESTFLAGS) $(PKGS)

test-short:
	$(GO) test -short -count=1 $(PKGS)

# bench runs the benchmarks (real servers, minutes); results go to docs/benchmarks.md by hand.
bench: deps
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 60m $(PKGS)

# chaos runs the randomized fault suite for MINUTES with SEED, printing each fault and check.
chaos: deps
	@echo "fault suite seed $(SEED), $(MINUTES) minutes"
	CHAOS_SEED=$(SEED) CHAOS_MINUTES=$(MINUTES) $(GO) test -count=1 -v -run '^TestChaos$$' \
		-timeout $$(awk 'BEGIN { print int($(MINUTES) * 60 + 900) }')s ./e2e/chaos/

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeUp -fuzztime 30s ./internal/wire/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./internal/money/

clean:
	rm -rf bin
