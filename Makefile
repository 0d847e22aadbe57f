# posgate — the two commands that matter on a fresh Debian machine (as root):
#   make demo   runs the main job end to end on embedded defaults (arrives with store-server)
#   make test   installs what the tests need and runs the whole suite with the race detector
#   make release  the binaries for the field (Windows, Linux, ARM/Android) in dist/, with SHA256SUMS

SHELL     := /bin/bash
GO        ?= go
# The field tests (e2e/field: the agent under Wine and qemu-user) run as their own steps.
PKGS      ?= $(shell $(GO) list ./... | grep -v '/e2e/field$$')
TESTFLAGS ?= -race -count=1 -timeout 14m
BENCHTIME ?= 1x
APT_PKGS  := redis-server redis-sentinel redis-tools mosquitto postgresql sqlite3 nodejs chromium fonts-wqy-microhei prometheus systemd
# The cross toolchains and emulators: mingw-w64 (Windows), the aarch64 cross gcc (ARM tills,
# Android), qemu-user and 64-bit Wine (Debian 12: wine is the launcher, wine64 the loader;
# no wine32, no i386 multiarch), zip for the Windows archive.
CROSS_PKGS := gcc-mingw-w64-x86-64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user wine wine64 zip
BINS      := terminal-agent store-server hq-sync
# SEED draws the randomized fault suite's schedule (e2e/chaos): a fresh one each run unless
# given; MINUTES is how long `make chaos` injects faults.
SEED      ?= $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
SEED      := $(SEED)
MINUTES   ?= 10

# The OpenAPI linter, pinned: node and npm come with deps (nodejs); npx fetches it once.
REDOCLY   ?= npx --yes @redocly/cli@2.77.0

# The version stamped into release binaries: the nearest v* tag (git describe), else 0.1.0.
VERSION   ?= $(or $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null | sed 's/^v//'),0.1.0)
COMMIT    ?= $(or $(shell git rev-parse --short=12 HEAD 2>/dev/null),unknown)
LDX       := -X github.com/posgate/posgate/internal/version.Version=$(VERSION) -X github.com/posgate/posgate/internal/version.Commit=$(COMMIT)
# Release flags (keep alike with e2e.Target.BuildArgs): no paths (-trimpath: nor a GOROOT that
# would find a zone database the device lacks), no symbol tables; linux/arm64 static, with Go's
# own resolver and user lookup, for Android and ARM tills.
XFLAGS    := -trimpath
# The packages whose unit tests run under Wine.
WINE_UNIT_PKGS ?= ./terminal-agent/... ./internal/...
ARM_TAGS  := netgo,osusergo,sqlite_omit_load_extension
WIN_ENV   := CGO_ENABLED=1 GOOS=windows GOARCH=amd64 CC=x86_64-w64-mingw32-gcc
ARM_ENV   := CGO_ENABLED=1 GOOS=linux GOARCH=arm64 CC=aarch64-linux-gnu-gcc
AMD_ENV   := CGO_ENABLED=1 GOOS=linux GOARCH=amd64
DIST      := dist
# step runs a make step and prints how long it took.
step = @s=$$(date +%s); echo "== $@"; $(1); rc=$$?; echo "== $@: $$(( $$(date +%s) - s )) s (exit $$rc)"; exit $$rc

.PHONY: all build deps deps-cross demo test test-short test-go vet vet-windows test-qemu-unit test-wine-unit \
	test-qemu test-wine release fmt bench chaos fuzz clean openapi-lint

all: build

build:
	mkdir -p bin
	for b in $(BINS); do $(GO) build -o bin/$$b ./$$b || exit 1; done
	$(GO) build -o bin/posgate-demo ./demo

# demo runs the chain end to end (Redis Sentinel trio, store-server on its embedded broker,
# three terminal-agents, a cashier load, a terminal offline, a Redis master killed, hq-sync
# serve and upload, the tills' day close and HQ's reconcile) and ends with PASS or FAIL.
# HOLD=1 keeps everything running after the verdict, for a person to open the pages, until Ctrl-C.
demo: deps build
	bin/posgate-demo --bin bin --duration $(or $(DURATION),20s) $(if $(HOLD),--hold)

# deps installs the real servers the tests talk to (never mocked); a no-op when present.
deps:
	@missing=""; \
	for b in redis-server redis-sentinel redis-cli redis-benchmark mosquitto node chromium promtool systemd-analyze; do \
		command -v $$b >/dev/null 2>&1 || [ -x /usr/sbin/$$b ] || missing="$$missing $$b"; \
	done; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	ls /usr/share/fonts/truetype/wqy/wqy-microhei.ttc >/dev/null 2>&1 || missing="$$missing fonts-wqy-microhei"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" != 0 ]; then echo "run as root (apt-get install -y $(APT_PKGS))"; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PKGS) >/dev/null; \
	fi
	@# npx runs the OpenAPI linter: NodeSource's nodejs brings it, Debian's comes without it.
	@command -v npx >/dev/null 2>&1 || { echo "installing: npm"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	@# Debian starts the packaged services on their default ports; the tests use their own.
	-@systemctl disable --now redis-server redis-sentinel mosquitto postgresql prometheus prometheus-node-exporter >/dev/null 2>&1 || true
	@$(MAKE) --no-print-directory deps-cross

# deps-cross installs the cross toolchains and emulators (no recommended packages: Wine's pull
# in a desktop). binfmt is not needed: the tests call qemu-aarch64 and wine by name.
deps-cross:
	@missing=""; \
	for b in x86_64-w64-mingw32-gcc aarch64-linux-gnu-gcc qemu-aarch64 wine wineserver zip unshare; do \
		command -v $$b >/dev/null 2>&1 || missing="$$missing $$b"; \
	done; \
	[ -x /usr/lib/wine/wine64 ] || missing="$$missing wine64"; \
	[ -e /usr/aarch64-linux-gnu/lib/libc.a ] || missing="$$missing libc6-dev-arm64-cross"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" != 0 ]; then echo "run as root (apt-get install -y --no-install-recommends $(CROSS_PKGS))"; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(CROSS_PKGS) >/dev/null; \
	fi

vet:
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (gofmt -l . ; echo "gofmt needed"; exit 1)

# test runs each step in turn and prints its duration: the suite (race detector), the agent's
# packages vetted for Windows, its unit tests under qemu-user (arm64) and Wine (windows/amd64),
# and the field tests: the agent under qemu-user and under Wine against a real store.
# test-wine-unit is not among them: under Debian 12's Wine 8.0, Go 1.26's os.RemoveAll fails
# ("unlinkat …: Invalid function") on every file a test's t.TempDir holds, whatever the package;
# run it by hand with a newer Wine.
test: deps vet openapi-lint vet-windows test-go test-qemu-unit test-qemu test-wine

# test-go runs every test, the fault suite's short schedule (1 minute) with a fresh seed among them.
test-go:
	@echo "fault suite seed $(SEED) (rerun it: make chaos SEED=$(SEED) MINUTES=1)"
	$(call step,CHAOS_SEED=$(SEED) $(GO) test $(TESTFLAGS) $(PKGS))

# vet-windows: the agent and the shared packages compile, tests included, for Windows.
vet-windows:
	$(call step,$(WIN_ENV) $(GO) vet ./terminal-agent/... ./internal/... ./e2e/)

# test-qemu-unit: the agent's and the shared packages' unit tests, built as the arm64 release
# is (static, netgo), run under qemu-user.
test-qemu-unit:
	$(call step,$(ARM_ENV) $(GO) test -short -count=1 -tags $(ARM_TAGS) -ldflags '-extldflags -static' \
		-exec qemu-aarch64 ./terminal-agent/... ./internal/...)

# test-wine-unit: the same for windows/amd64 under Wine, in a Wine prefix of its own. Wine 8.0
# (Debian 12) lacks ProcessPrng, which Go 1.26 binaries load from system32's
# bcryptprimitives.dll: the test fixture e2e/winefix builds a stand-in there (as e2e.SetupWine).
test-wine-unit:
	$(call step,prefix=$$(mktemp -d /tmp/posgate-wine-XXXXXX) && \
		export WINEPREFIX=$$prefix WINEDEBUG=-all WINEDLLOVERRIDES=bcryptprimitives=n && \
		wine cmd /c ver >/dev/null 2>&1 && \
		{ [ -e $$prefix/drive_c/windows/system32/bcryptprimitives.dll ] || x86_64-w64-mingw32-gcc -O2 -shared \
			-o $$prefix/drive_c/windows/system32/bcryptprimitives.dll e2e/winefix/bcryptprimitives.c \
			e2e/winefix/bcryptprimitives.def -ladvapi32; } && \
		$(WIN_ENV) $(GO) test -short -count=1 -exec wine $(WINE_UNIT_PKGS); \
		rc=$$?; wineserver -k; rm -rf $$prefix; exit $$rc)

# test-qemu / test-wine: the field tests (e2e/field), the release binaries against a real store.
# The test's exit status is the pipe's first (a subshell's, so that step still prints the time).
test-qemu:
	$(call step,($(GO) test -count=1 -timeout 10m -run 'ARM64|Android' -v ./e2e/field/ 2>&1 | grep -v '^    stack.go'; exit $${PIPESTATUS[0]}))

test-wine:
	$(call step,($(GO) test -count=1 -timeout 10m -run 'Windows' -v ./e2e/field/ 2>&1 | grep -v '^    stack.go'; exit $${PIPESTATUS[0]}))

# release writes dist/: one directory and archive per platform (zip for Windows, tar.gz
# otherwise) and SHA256SUMS. terminal-agent for windows/amd64, linux/amd64 and linux/arm64;
# store-server and hq-sync for linux/amd64 and linux/arm64.
REL       = $(DIST)/posgate_$(VERSION)_$(1)
release: deps-cross
	rm -rf $(DIST) && mkdir -p $(call REL,windows_amd64) $(call REL,linux_amd64) $(call REL,linux_arm64)
	time $(WIN_ENV) $(GO) build $(XFLAGS) -ldflags '-s -w $(LDX)' -o $(call REL,windows_amd64)/terminal-agent.exe ./terminal-agent
	for b in $(BINS); do echo "$$b linux/amd64"; time $(AMD_ENV) $(GO) build $(XFLAGS) -ldflags '-s -w $(LDX)' \
		-o $(call REL,linux_amd64)/$$b ./$$b || exit 1; done
	for b in $(BINS); do echo "$$b linux/arm64"; time $(ARM_ENV) $(GO) build $(XFLAGS) -tags $(ARM_TAGS) \
		-ldflags '-s -w $(LDX) -extldflags -static' -o $(call REL,linux_arm64)/$$b ./$$b || exit 1; done
	cd $(DIST) && zip -qrX posgate_$(VERSION)_windows_amd64.zip posgate_$(VERSION)_windows_amd64
	cd $(DIST) && for d in linux_amd64 linux_arm64; do \
		tar --sort=name --owner=0 --group=0 --numeric-owner -czf posgate_$(VERSION)_$$d.tar.gz posgate_$(VERSION)_$$d; done
	cd $(DIST) && sha256sum *.zip *.tar.gz > SHA256SUMS && cat SHA256SUMS
	ls -l $(DIST)/*/

# openapi-lint lints the terminal-agent's OpenAPI document (what POS teams generate their
# Kotlin and C# clients from); the Go tests validate real requests and answers against it.
openapi-lint: deps
	$(REDOCLY) lint terminal-agent/api/openapi.json

test-short:
	$(GO) test -short -count=1 ./...

# bench runs the benchmarks (real servers, minutes; the chain-scale ones build a year's ledger and a
# 10M-transaction day); results go to docs/benchmarks.md by hand.
bench: deps
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 150m $(PKGS)

# chaos runs the randomized fault suite for MINUTES with SEED, printing each fault and check.
chaos: deps
	@echo "fault suite seed $(SEED), $(MINUTES) minutes"
	CHAOS_SEED=$(SEED) CHAOS_MINUTES=$(MINUTES) $(GO) test -count=1 -v -run '^TestChaos$$' \
		-timeout $$(awk 'BEGIN { print int($(MINUTES) * 60 + 900) }')s ./e2e/chaos/

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeUp -fuzztime 30s ./internal/wire/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./internal/money/
	$(GO) test -run '^$$' -fuzz FuzzDecodeBatchLikeEncodingJSON -fuzztime 30s ./hq-sync/serve/

clean:
	rm -rf bin $(DIST)
