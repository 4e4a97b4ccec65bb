#!/usr/bin/env bash
# Checks that what deploy/ ships can be deployed: the Kubernetes manifests against the API schemas
# (strict: an unknown or misspelt field fails), the systemd units with systemd-analyze, and the CLI
# as a node installs it (npm pack → npm install -g from the tarball → rankwatch --version and mfu).
# Needs Python 3 (kubernetes-validate ships its schemas, so it works offline once installed) and
# npm; systemd-analyze is used where the machine has it. Run from anywhere: bash deploy/check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# kubernetes-validate, pinned, in a virtual environment of its own under .cache (git-ignored).
KV_VERSION=1.37.0
venv=.cache/deploy-check-venv
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$KV_VERSION"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KV_VERSION"
fi
manifests=(deploy/collector/daemonset.yaml deploy/up/up.yaml)
# The oldest Kubernetes we claim and the newest the validator knows.
for k in 1.28.0 "$KV_VERSION"; do
  "$venv/bin/kubernetes-validate" --strict --quiet -k "$k" "${manifests[@]}"
done
echo "deploy: ${#manifests[@]} manifests valid (strict) for Kubernetes 1.28 and $KV_VERSION"

# The CLI from its tarball, into a throwaway prefix, as a node would install it.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# npm pack builds (prepare) and ships the lock file as npm-shrinkwrap.json (prepack), so the
# install gets the tested dependency versions, not the newest that match.
tarball=$(npm pack --silent --pack-destination "$tmp" | tail -n 1)
npm install -g --prefix "$tmp/prefix" --no-audit --no-fund --prefer-offline "$tmp/$tarball" >/dev/null 2>"$tmp/install.log" ||
  { cat "$tmp/install.log" >&2; exit 1; }
tar -tzf "$tmp/$tarball" > "$tmp/files"
grep -qx package/npm-shrinkwrap.json "$tmp/files" || { echo "deploy: $tarball has no npm-shrinkwrap.json" >&2; exit 1; }
rw="$tmp/prefix/bin/rankwatch"
want="rankwatch $(node -p 'require("./package.json").version')"
got=$("$rw" --version)
[ "$got" = "$want" ] || { echo "deploy: installed rankwatch --version says '$got', expected '$want'" >&2; exit 1; }
cat > "$tmp/model.json" <<'JSON'
{ "params": 8.03e9, "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "swiglu": true, "seq_len": 8192, "vocab": 128256 }
JSON
"$rw" mfu --model "$tmp/model.json" --tokens-per-step 1048576 --step-ms 5000 --gpus 64 --gpu-model H100-SXM --json > "$tmp/mfu.json"
node -e 'const r = require(process.argv[1]); if (!(r.mfu > 0 && r.mfu < 1)) { console.error("deploy: installed rankwatch mfu gave", r); process.exit(1); }' "$tmp/mfu.json"
echo "deploy: $tarball installs with npm install -g and runs ($got; mfu from the installed binary)"

# The systemd units, pointed at the binary just installed (they name /usr/local/bin/rankwatch).
if command -v systemd-analyze >/dev/null; then
  for unit in deploy/collector/rankwatch-collector.service deploy/up/rankwatch-up.service; do
    sed "s#/usr/local/bin/rankwatch#$rw#" "$unit" > "$tmp/$(basename "$unit")"
    out=$(systemd-analyze verify "$tmp/$(basename "$unit")" 2>&1) || { echo "$out" >&2; exit 1; }
    [ -z "$out" ] || { echo "deploy: systemd-analyze verify $unit:" >&2; echo "$out" >&2; exit 1; }
  done
  echo "deploy: systemd units verified"
else
  echo "deploy: systemd-analyze not found; units not verified"
fi
