#!/usr/bin/env bash
# Print an access token of the test provider (scripts/oidc/provider.mjs): the client
# credentials grant for CLIENT (secret CLIENT-secret) at ISSUER, for RESOURCE, with SCOPE.
# For `mcp-load gate --token-cmd` and by hand. Usage: token.sh ISSUER CLIENT RESOURCE [SCOPE]
set -euo pipefail
issuer=$1 client=$2 resource=$3 scope=${4:-mcp}
curl -fsS --max-time 10 -u "$client:$client-secret" -d grant_type=client_credentials \
  --data-urlencode "resource=$resource" --data-urlencode "scope=$scope" "$issuer/token" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])'
