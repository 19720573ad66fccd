#!/usr/bin/env bash
# Rebuilds assets/vendor/uplot from the npm registry (make studio-vendor):
# Studio's chart library is uPlot's own distributed build, unchanged, with
# its licence. Nothing in Studio is compiled; this is the only fetched file.
set -euo pipefail
version=1.6.32
sum=4b8a8191e425658e3ea8c8c1314b0fc679c861ee3a1af2b20c7b16ba50b5133d
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$version" >/dev/null)
echo "$sum  $tmp/uplot-$version.tgz" | sha256sum -c --quiet
tar -xzf "$tmp/uplot-$version.tgz" -C "$tmp"
mkdir -p assets/vendor/uplot
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" "$tmp/package/LICENSE" assets/vendor/uplot/
echo "uPlot $version vendored into $(pwd)/assets/vendor/uplot"
