#!/usr/bin/env bash
# Installs the ACP agent programs that the dsh-subagent-acp tests and
# benchmark run against, and the MCP servers the dsh-mcp and dsh-cli tests
# run against, from the package registries, at pinned versions:
#   - the TypeScript SDK's example agent (npm @agentclientprotocol/sdk,
#     pinned with package-lock.json): node_modules/@agentclientprotocol/sdk/dist/examples/agent.js
#   - the MCP reference servers (npm @modelcontextprotocol/server-everything
#     and server-filesystem, pinned the same way):
#     node_modules/@modelcontextprotocol/server-*/dist/index.js
#   - the Python SDK's example agents (PyPI agent-client-protocol, pinned in
#     requirements.txt; the examples ship only in its source distribution):
#     venv/ holds the SDK, python-examples/ the examples.
# Idempotent: a second run with everything in place only checks versions.
# Needs node/npm (20 or newer) and python3 (3.10 or newer) on PATH.
set -euo pipefail
cd "$(dirname "$0")"

PY_SDK_VERSION=0.12.1

# Say what is missing before anything is fetched.
missing=()
command -v npm >/dev/null 2>&1 || missing+=("Node.js 20 or newer with npm (Debian: apt-get install nodejs npm)")
if ! python3 -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' >/dev/null 2>&1; then
  missing+=("Python 3.10 or newer with venv (Debian: apt-get install python3 python3-venv)")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "peers: the ACP test agents need:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  echo "peers: only the dsh-subagent-acp, dsh-mcp and dsh-cli tests (and the workspace run) use them" >&2
  exit 1
fi

if ! [ -f node_modules/@agentclientprotocol/sdk/dist/examples/agent.js ] \
  || ! [ -f node_modules/@modelcontextprotocol/server-everything/dist/index.js ] \
  || ! [ -f node_modules/@modelcontextprotocol/server-filesystem/dist/index.js ] \
  || ! cmp -s package-lock.json node_modules/.dsh-installed 2>/dev/null; then
  echo "peers: npm ci (@agentclientprotocol/sdk, @modelcontextprotocol/server-everything, @modelcontextprotocol/server-filesystem)"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.dsh-installed
fi

if ! [ -x venv/bin/python ] || ! cmp -s requirements.txt venv/.dsh-installed 2>/dev/null; then
  echo "peers: python venv (agent-client-protocol ${PY_SDK_VERSION})"
  rm -rf venv
  python3 -m venv venv
  venv/bin/pip install --quiet --disable-pip-version-check --no-deps -r requirements.txt
  cp requirements.txt venv/.dsh-installed
fi

if ! [ -f "python-examples/${PY_SDK_VERSION}/echo_agent.py" ]; then
  echo "peers: python SDK examples (source distribution ${PY_SDK_VERSION})"
  rm -rf python-examples sdist
  venv/bin/pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    --dest sdist "agent-client-protocol==${PY_SDK_VERSION}"
  mkdir -p "python-examples/${PY_SDK_VERSION}"
  tar -xzf "sdist/agent_client_protocol-${PY_SDK_VERSION}.tar.gz" -C "python-examples/${PY_SDK_VERSION}" \
    --strip-components=2 "agent_client_protocol-${PY_SDK_VERSION}/examples"
  rm -rf sdist
fi

echo "peers: ready (node $(node --version), $(venv/bin/python --version))"
