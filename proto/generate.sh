#!/usr/bin/env bash
# Regenerates proto/inferencepb from the .proto files with pinned generators:
#   protoc 3.21.12 (Debian bookworm: apt-get install protobuf-compiler),
#   protoc-gen-go v1.36.12, protoc-gen-go-grpc v1.5.1 (installed below into a temp GOBIN).
# Run from anywhere: bash proto/generate.sh
set -euo pipefail
cd "$(dirname "$0")"
command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler" >&2; exit 1; }
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
PATH=$bin:$PATH protoc -I . \
  --go_out=inferencepb --go_opt=paths=source_relative \
  --go-grpc_out=inferencepb --go-grpc_opt=paths=source_relative \
  grpc_service.proto model_config.proto
