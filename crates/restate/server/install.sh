#!/usr/bin/env bash
# Installs the Restate server that the dsh-restate tests run against, from
# the npm registry, at a pinned version (@restatedev/restate-server 1.7.12,
# pinned with package-lock.json; it pairs with the restate-sdk pin in
# crates/restate/Cargo.toml). npm's wrapper only starts a platform binary,
# which the tests run directly:
#   node_modules/@restatedev/restate-server-<os>-<cpu>/bin/restate-server
# The link bin/restate-server points at it, whatever the platform.
# No install scripts run (the package's only one is a Scarf analytics ping).
# Idempotent: a second run with everything in place only checks versions.
# Needs node/npm (20 or newer) on PATH, and about 230 MB of disk.
set -euo pipefail
cd "$(dirname "$0")"

SERVER_VERSION=1.7.12

if ! command -v npm >/dev/null 2>&1; then
  echo "restate: the Restate server is installed from npm, which needs:" >&2
  echo "  - Node.js 20 or newer with npm (Debian: apt-get install nodejs npm)" >&2
  echo "restate: only the dsh-restate tests (and the workspace run) use it; cargo test -p <any other crate> does not" >&2
  exit 1
fi

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform=linux-x64 ;;
  Linux-aarch64) platform=linux-arm64 ;;
  Darwin-x86_64) platform=darwin-x64 ;;
  Darwin-arm64) platform=darwin-arm64 ;;
  *)
    echo "restate: npm ships restate-server ${SERVER_VERSION} for Linux and macOS on x86-64 and arm64, not for $(uname -s) $(uname -m)" >&2
    exit 1
    ;;
esac
binary="node_modules/@restatedev/restate-server-${platform}/bin/restate-server"

if ! [ -x "$binary" ] || ! cmp -s package-lock.json node_modules/.dsh-installed 2>/dev/null; then
  echo "restate: npm ci (@restatedev/restate-server ${SERVER_VERSION}, about 81 MB)"
  SCARF_ANALYTICS=false npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
  cp package-lock.json node_modules/.dsh-installed
fi

if ! [ -x "$binary" ]; then
  echo "restate: npm ci ran but $binary is missing: npm skipped the optional platform package (is --omit=optional set in npm's config?)" >&2
  exit 1
fi
mkdir -p bin
ln -sfn "../$binary" bin/restate-server

found=$(bin/restate-server --version 2>/dev/null || true)
case "$found" in
  *" ${SERVER_VERSION}"*) ;;
  *)
    echo "restate: bin/restate-server says '${found}', not ${SERVER_VERSION}: remove crates/restate/server/node_modules and run this script again" >&2
    exit 1
    ;;
esac

echo "restate: ready (${found})"
