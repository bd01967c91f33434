#!/usr/bin/env bash
# Regenerate dashboard.schema.json: Grafana's own dashboard types (npm @grafana/schema)
# turned into JSON Schema by ts-json-schema-generator. Needs node + npm; writes only here.
# The tests validate every generated dashboard against the committed output.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm init -y >/dev/null
npm install --silent --no-audit --no-fund \
  @grafana/schema@13.2.3 ts-json-schema-generator@2.4.0 typescript@5 >/dev/null
npx --no-install ts-json-schema-generator \
  --path node_modules/@grafana/schema/dist/types/raw/dashboard/x/types.gen.d.ts \
  --type Dashboard --no-type-check --additional-properties \
  -o "$here/dashboard.schema.json"
echo "wrote $here/dashboard.schema.json"
