GO ?= go
PROTOC ?= protoc
GOBIN := $(shell $(GO) env GOPATH)/bin

.PHONY: all build run test soak test-unit test-e2e test-e2e-main test-e2e-replica test-e2e-etcd test-k8s test-k8s-passes test-k8s-etcd fuzz proto proto-check manifests manifests-check vet fmt bench bench-cluster bench-pitr tools clean cluster cluster-status cluster-stop

# Unit and protocol tests get the race detector; process-level suites run
# the built binary and do not need it.
UNIT_PKGS = ./internal/... ./cmd/... ./proto/...
FUZZTIME ?= 10s

all: build

# COMMIT is the git commit the binaries report (`netsy --version`), with
# "-dirty" when tracked files have uncommitted changes; empty outside git.
COMMIT ?= $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null || c=$$c-dirty; echo $$c; })
LDFLAGS = -X github.com/netsy-io/netsy/internal/version.commit=$(COMMIT)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/netsy ./cmd/netsy
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/netsyctl ./cmd/netsyctl

run:
	$(GO) run ./cmd/netsy

# cluster runs MinIO and three nodes on loopback (deploy/local-cluster.sh,
# data under .cache/local-cluster/) and prints how to reach them; they keep
# running until cluster-stop.
cluster:
	bash deploy/local-cluster.sh start

cluster-status:
	bash deploy/local-cluster.sh status

cluster-stop:
	bash deploy/local-cluster.sh stop

proto:
	@command -v $(PROTOC) >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler"; exit 1; }
	GOFLAGS= $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	GOFLAGS= $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	PATH="$(GOBIN):$$PATH" $(PROTOC) -I proto --go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative proto/netsy/v1/*.proto
	mkdir -p proto/netsyv1 && mv proto/netsy/v1/*.pb.go proto/netsyv1/

# proto-check regenerates the peer protocol's code in a scratch copy and
# fails if it differs from what is committed (make proto was not run, or
# the generators' versions drifted).
proto-check:
	@rm -rf .cache/proto-check && mkdir -p .cache/proto-check && cp -r proto .cache/proto-check/
	@GOFLAGS= GOBIN=$(CURDIR)/.cache/proto-check/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	@GOFLAGS= GOBIN=$(CURDIR)/.cache/proto-check/bin $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	@cd .cache/proto-check && PATH="$(CURDIR)/.cache/proto-check/bin:$$PATH" $(PROTOC) -I proto --go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative proto/netsy/v1/*.proto && mv proto/netsy/v1/*.pb.go proto/netsyv1/
	@diff -r proto/netsyv1 .cache/proto-check/proto/netsyv1 || { echo "proto/netsyv1 differs from a fresh make proto"; exit 1; }
	@echo "proto: generated code matches proto/"

# manifests renders deploy/kubernetes from the Helm chart in deploy/helm/netsy
# (default values): the chart is their only source. manifests-check fails if
# the committed files differ from a fresh render (the chart was edited and
# make manifests not run, or deploy/kubernetes was edited by hand).
manifests:
	bash scripts/helm-manifests.sh deploy/kubernetes

manifests-check:
	@rm -rf .cache/manifests-check && bash scripts/helm-manifests.sh .cache/manifests-check
	@diff -r -x secrets.yaml deploy/kubernetes .cache/manifests-check || { echo "deploy/kubernetes differs from the chart: run make manifests"; exit 1; }
	@echo "manifests: deploy/kubernetes matches the chart"

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/e2e/

fmt:
	gofmt -l -w $$(git ls-files '*.go')

# tools installs what the tests need into the git-ignored .cache/: etcd,
# etcdctl and etcd's benchmark tool (v3.6.10), MinIO, and kube-apiserver and
# kubectl (v1.34.4, for the TLS e2e and the deploy/kubernetes dry run; a
# cold build takes minutes, later runs find them built), helm (v3.22.0,
# which renders, lints and checks the chart in deploy/helm/netsy) and promtool
# (Prometheus v3.16, for deploy/prometheus's rules). systemd-analyze,
# which checks deploy/systemd, comes with the machine's systemd; where it is
# missing, Debian's systemd package brings it.
tools:
	bash scripts/build-etcd.sh >/dev/null
	bash deploy/minio/minio.sh install
	bash scripts/build-kube.sh >/dev/null
	bash scripts/build-helm.sh >/dev/null
	bash scripts/build-promtool.sh >/dev/null
	@command -v systemd-analyze >/dev/null || { echo "installing systemd-analyze: apt-get install systemd"; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends systemd >/dev/null; }
	@command -v $(PROTOC) >/dev/null || { echo "installing protoc: apt-get install protobuf-compiler"; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends protobuf-compiler >/dev/null; }

# The process-level passes after the e2e suite (the replica e2e pass and the
# k8s suites on one node and on a replica of three) mostly wait on their
# servers (62 CPU-s in a 148 s k8s pass: under half of one core), so test
# runs them side by side, each pass's output printed whole when it ends; the
# e2e suite itself, whose timed tests want the machine to themselves, runs
# alone before them.
test: tools
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/e2e/
	$(MAKE) proto-check manifests-check test-unit fuzz test-e2e-main
	$(MAKE) -j2 --output-sync=target test-e2e-replica test-k8s-passes

test-unit:
	NETSY_REQUIRE_MINIO=1 $(GO) test -race -count=1 -timeout 15m $(UNIT_PKGS)

# The e2e suite carries the e2e build tag so `go test ./...` never starts
# servers by accident.
test-e2e: test-e2e-main test-e2e-replica

# -parallel 4: the tests that call t.Parallel (they wait on their servers and
# time nothing; see test/e2e/main_test.go) run four at a time once the
# serial, timed ones are done.
test-e2e-main: build
	NETSY_REQUIRE_MINIO=1 NETSY_BIN=$(CURDIR)/bin/netsy NETSYCTL_BIN=$(CURDIR)/bin/netsyctl $(GO) test -tags e2e -count=1 -parallel 4 -timeout 20m ./test/e2e/

# The client-facing suites again, against a replica of a 3-node cluster.
test-e2e-replica: build
	NETSY_E2E_REPLICA=1 NETSY_BIN=$(CURDIR)/bin/netsy NETSYCTL_BIN=$(CURDIR)/bin/netsyctl $(GO) test -tags e2e -count=1 -timeout 20m \
		-run '^(TestEtcdctl|TestElection|TestMutex|TestWatchStitching|TestTxnManyCompares|TestProgressNotify|TestLinearizability)' ./test/e2e/

# soak runs the linearizability check under faults with a long random
# fault plan (not part of test or CI): SOAK_ROUNDS faults per quorum mode,
# network cuts and SIGSTOPs included; NETSY_SOAK_SEED=N replays a plan the
# log names. Then every partition class under both quorum modes.
SOAK_ROUNDS ?= 60
soak: tools build
	NETSY_REQUIRE_MINIO=1 NETSY_SOAK_ROUNDS=$(SOAK_ROUNDS) NETSY_PARTITION_QUORUM=-1,0 NETSY_BIN=$(CURDIR)/bin/netsy NETSYCTL_BIN=$(CURDIR)/bin/netsyctl \
		$(GO) test -tags e2e -count=1 -timeout 6h -v -run '^(TestClusterLinearizable|TestClusterPartitions)$$' ./test/e2e/

# test-e2e-etcd runs the same suite against etcd 3.6.10, proving the tests.
test-e2e-etcd:
	NETSY_E2E_TARGET=etcd $(GO) test -tags e2e -count=1 -timeout 20m ./test/e2e/

# test-k8s runs kube-apiserver's own storage suites (pkg/storage/etcd3 and
# pkg/storage/cacher, v0.34) against a fresh netsy process per test.
test-k8s: build
	NETSY_BIN=$(CURDIR)/bin/netsy bash test/k8s/run.sh netsy
	# Again against a replica's endpoint of a 3-node cluster (--quorum -1).
	NETSY_CLUSTER_NODES=3 NETSY_BIN=$(CURDIR)/bin/netsy bash test/k8s/run.sh netsy

# test-k8s-passes is test-k8s with both passes side by side on one compile
# of the suites (run.sh runs one pass per listed node count).
test-k8s-passes: build
	NETSY_CLUSTER_NODES="1 3" NETSY_BIN=$(CURDIR)/bin/netsy bash test/k8s/run.sh netsy

# test-k8s-etcd runs the same suites against etcd 3.6.10, proving the harness.
test-k8s-etcd:
	bash test/k8s/run.sh etcd

# fuzz runs every fuzz target briefly (the committed seed corpora always run
# as part of test-unit).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./internal/datafile/
	$(GO) test -run '^$$' -fuzz '^FuzzValidate' -fuzztime $(FUZZTIME) ./internal/etcdapi/

clean:
	rm -rf bin

# bench runs Netsy (sync mode on the file store, --quorum -1, sync mode on a
# harness-started MinIO) and etcd side by side with etcd's benchmark tool (not
# part of test or CI), with the 1 M-key scale row, then bench-cluster and
# bench-pitr; results go to bench/results/. BENCHFLAGS=-quick for a smoke run
# (without the scale row unless named in -workloads).
BENCHFLAGS ?=
bench:
	$(GO) run ./bench/cmd/netsybench $(BENCHFLAGS)
	$(MAKE) --no-print-directory bench-cluster
	$(MAKE) --no-print-directory bench-pitr

# bench-cluster compares a 3-node Netsy cluster on MinIO with a 3-node t4 on the
# same MinIO (scripts/build-t4.sh) and a 3-member etcd cluster: put, range and
# watch rows with CPU per 1000 operations, failover (leader SIGKILL, handoff)
# and the 1 M-key scale row on the clusters.
# BENCHCLUSTERFLAGS (default: BENCHFLAGS) are its flags.
BENCHCLUSTERFLAGS ?= $(BENCHFLAGS)
bench-cluster:
	$(GO) run ./bench/cmd/netsybench -cluster $(BENCHCLUSTERFLAGS)

# bench-pitr times point-in-time restore and branch creation on a 1 M-revision
# history in a bucket of the harness's MinIO (issue 21; netsy only).
# BENCHPITRFLAGS (default: BENCHFLAGS) are its flags.
BENCHPITRFLAGS ?= $(BENCHFLAGS)
bench-pitr:
	$(GO) run ./bench/cmd/netsybench -workloads pitr $(BENCHPITRFLAGS)
