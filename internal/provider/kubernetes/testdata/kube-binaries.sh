#!/usr/bin/env bash
# kube-binaries.sh builds the kube-apiserver and etcd binaries the kubernetes
# provider's tests run against, from the Go module proxy (no image registry,
# no prebuilt downloads), and caches them in
# ${XDG_CACHE_HOME:-$HOME/.cache}/tide/kube/<kube version>/ so later runs
# start in seconds. It prints that directory on its last line.
#
# etcd is built from go.etcd.io/etcd/server/v3 at the version kubernetes'
# own go.mod requires, rather than Debian's etcd-server (3.4.23), because
# kube-apiserver 1.34 is tested against etcd 3.6 and relies on newer watch
# features (progress notify, consistent reads from cache).
#
# Usage: kube-binaries.sh            (build if missing)
#        KUBE_VERSION=v1.34.4 kube-binaries.sh
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.34.4}
out=${XDG_CACHE_HOME:-$HOME/.cache}/tide/kube/$KUBE_VERSION
if [ -x "$out/kube-apiserver" ] && [ -x "$out/etcd" ]; then
	echo "$out"
	exit 0
fi

# One build at a time: test packages running in parallel (and people) may
# start this together; the second waits for the first and then finds the
# binaries. Each build stages into its own directory, so nothing half-built
# is ever moved into place or removed from under another.
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
if [ -x "$out/kube-apiserver" ] && [ -x "$out/etcd" ]; then
	echo "$out"
	exit 0
fi

# Staging modules (k8s.io/api, client-go, ...) are published as v0.<minor>.<patch>.
minor_patch=${KUBE_VERSION#v1.}
staging=v0.$minor_patch
minor=${minor_patch%%.*}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "${stage:-}"' EXIT
cd "$tmp"
export GOFLAGS=-mod=mod GOWORK=off
go mod init tide.local/kubebuild >/dev/null 2>&1

kube_gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
if [ ! -f "$kube_gomod" ]; then
	echo "kube-binaries: cannot download k8s.io/kubernetes@$KUBE_VERSION" >&2
	exit 1
fi
# kubernetes' go.mod replaces every staging module with ./staging/src/...;
# a consumer must pin each of them to its published version instead.
mods=$(sed -n 's#^[[:space:]]*\(k8s.io/[A-Za-z0-9._-]*\) => ./staging/.*#\1#p' "$kube_gomod")
args=()
for m in $mods; do
	args+=("-replace=$m=$m@$staging")
done
go mod edit "${args[@]}" -require="k8s.io/kubernetes@$KUBE_VERSION"
etcd_version=$(sed -n 's#^[[:space:]]*go.etcd.io/etcd/server/v3 \(v[^ ]*\).*#\1#p' "$kube_gomod" | head -1)
go mod edit -require="go.etcd.io/etcd/server/v3@$etcd_version"

stage="$out.tmp.$$"
mkdir -p "$stage"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
echo "kube-binaries: building kube-apiserver $KUBE_VERSION and etcd $etcd_version into $out (about 10 minutes on 2 cores, once)" >&2
# build LABEL ARGS... runs go build -v ARGS, printing every 30 s how many
# packages it compiled so far (the first build takes about 10 minutes on
# 2 cores: without this, make test would sit silent that long).
build() {
	local label=$1 start=$SECONDS
	shift
	echo "kube-binaries: building $label" >&2
	CGO_ENABLED=0 go build -v "$@" 2>"$tmp/build.log" &
	local pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null && sleep 1; done
		kill -0 "$pid" 2>/dev/null || break
		echo "kube-binaries: $label: $(grep -c . "$tmp/build.log") packages compiled, $((SECONDS - start))s" >&2
	done
	if ! wait "$pid"; then
		tail -40 "$tmp/build.log" >&2
		exit 1
	fi
	echo "kube-binaries: $label built in $((SECONDS - start))s ($(grep -c . "$tmp/build.log") packages)" >&2
}
echo "kube-binaries: [1/3] downloading modules" >&2
# go get lists hundreds of modules: keep its output for a failure.
if ! go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION" "go.etcd.io/etcd/server/v3@$etcd_version" >"$tmp/get.log" 2>&1; then
	tail -40 "$tmp/get.log" >&2
	exit 1
fi
build "[2/3] kube-apiserver $KUBE_VERSION" -trimpath -ldflags "$ldflags" -o "$stage/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
build "[3/3] etcd $etcd_version" -trimpath -ldflags "-s -w" -o "$stage/etcd" go.etcd.io/etcd/server/v3
rm -rf "$out"
mv "$stage" "$out"
echo "$out"
