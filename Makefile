GO ?= go
PROTOC ?= protoc
GOBIN := $(shell $(GO) env GOPATH)/bin

.PHONY: all build run test test-unit test-e2e test-k8s fuzz proto vet fmt bench tools clean

all: build

build:
	$(GO) build -o bin/netsy ./cmd/netsy
	$(GO) build -o bin/netsyctl ./cmd/netsyctl

run:
	$(GO) run ./cmd/netsy

proto:
	@command -v $(PROTOC) >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler"; exit 1; }
	GOFLAGS= $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	GOFLAGS= $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	PATH="$(GOBIN):$$PATH" $(PROTOC) -I proto --go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative proto/netsy/v1/*.proto
	mkdir -p proto/netsyv1 && mv proto/netsy/v1/*.pb.go proto/netsyv1/

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go')
