#!/usr/bin/env bash
# Build the binaries of a real (if small) Kubernetes control plane for the test suite.
#
# Why from source: this machine has no docker/kind/k3s and may only reach package
# registries, so we build kube-apiserver, kube-controller-manager and kube-scheduler from
# Debian's `kubernetes` SOURCE package (1.20.x, Debian bullseye) with Debian's Go 1.19, and
# take etcd from Debian's `etcd-server` binary package.
#
# The result is cached in ~/.cache/kinetic-test-cluster/<k8s-version>/bin/ so only the first
# run on a machine pays for the build; a re-run with a complete cache exits at once.
# Run as root (it apt-get installs the Go toolchain, etcd and a few build tools).
# The machine's apt sources are not touched: the bullseye deb-src list, its package lists
# and its download cache are private files under the cache directory.
set -euo pipefail

K8S_DEB_VERSION="1.20.5+really1.20.2-1"   # Debian bullseye's kubernetes source package
K8S_VERSION="v1.20.2"                     # the upstream version really inside it
CACHE_ROOT="${KINETIC_TEST_CLUSTER_CACHE:-$HOME/.cache/kinetic-test-cluster}"
CACHE="$CACHE_ROOT/$K8S_VERSION"
BIN="$CACHE/bin"
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler)

die() { echo "build.sh: ERROR: $*" >&2; exit 1; }
log() { echo "build.sh: $*" >&2; }

# Bumped when the recipe changes what the binaries do, so an older cache is rebuilt.
RECIPE="2: vendored reflect2 1.0.2 (custom resources crash a Go 1.19 build of 1.20's reflect2 1.0.1)"

cache_complete() {
    local f
    for f in "${COMPONENTS[@]}" etcd; do
        [[ -x "$BIN/$f" ]] || return 1
    done
    [[ "$(cat "$BIN/.recipe" 2>/dev/null)" == "$RECIPE" ]]
}

if cache_complete; then
    log "cached binaries present in $BIN"
    exit 0
fi

START=$(date +%s)
[[ $(id -u) -eq 0 ]] || die "must run as root (installs golang-1.19-go, etcd-server via apt-get)"
mkdir -p "$BIN" "$CACHE/work" || die "cannot create the cache directory $CACHE"

# --- 1. system packages: Go toolchain, etcd, build tools --------------------------------------
NEED=()
for pkg in golang-1.19-go golang-github-modern-go-reflect2-dev etcd-server dpkg-dev make gcc libc6-dev rsync; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || NEED+=("$pkg")
done
if ((${#NEED[@]})); then
    log "installing: ${NEED[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends "${NEED[@]}" >/dev/null \
        || die "apt-get install ${NEED[*]} failed"
fi
GO_ROOT=/usr/lib/go-1.19
[[ -x "$GO_ROOT/bin/go" ]] || die "$GO_ROOT/bin/go missing after installing golang-1.19-go"
ETCD_BIN=$(command -v etcd || true)
[[ -n "$ETCD_BIN" ]] || ETCD_BIN=/usr/bin/etcd
[[ -x "$ETCD_BIN" ]] || die "etcd binary not found after installing etcd-server"
cp -f "$ETCD_BIN" "$BIN/etcd"

# --- 2. the kubernetes source package, through a private apt configuration ---------------------
# Use the same Debian mirror host this machine already uses.
MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2>/dev/null | grep -v '^[[:space:]]*#' | grep -oE 'https?://[^ ]+/debian/?( |$)' \
    | head -n1 | tr -d ' ' || true)
MIRROR="${MIRROR%/}"
[[ -n "$MIRROR" ]] || MIRROR="http://deb.debian.org/debian"
APT_DIR="$CACHE/apt"
mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
echo "deb-src $MIRROR bullseye main" >"$APT_DIR/sources.list"
APT_OPTS=(
    -o "Dir::Etc::SourceList=$APT_DIR/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$APT_DIR/lists"
    -o "Dir::Cache=$APT_DIR/cache"
    -o "APT::Sandbox::User=root"
)
# Only the upstream tarball (kubernetes_<ver>.orig.tar.gz, vendor/ included) is fetched:
# `--tar-only` skips the .dsc/.debian.tar.xz, which some mirrors and proxies do not serve,
# and which only carry Debian packaging patches we do not need. Same tree everywhere.
SRC_DIR="$CACHE/work/kubernetes-${K8S_VERSION#v}"
if [[ ! -f "$SRC_DIR/.extracted" ]]; then
    log "fetching kubernetes=$K8S_DEB_VERSION source from $MIRROR (bullseye deb-src)"
    apt-get "${APT_OPTS[@]}" update -q >/dev/null || die "private apt-get update ($MIRROR bullseye deb-src) failed"
    rm -rf "$SRC_DIR"
    (cd "$CACHE/work" && apt-get "${APT_OPTS[@]}" source -q --tar-only --download-only \
        "kubernetes=$K8S_DEB_VERSION" >/dev/null) \
        || die "apt-get source --tar-only kubernetes=$K8S_DEB_VERSION failed"
    tar -C "$CACHE/work" -xzf "$CACHE/work/kubernetes_${K8S_DEB_VERSION%-*}.orig.tar.gz" \
        || die "cannot extract kubernetes_${K8S_DEB_VERSION%-*}.orig.tar.gz"
    [[ -f "$SRC_DIR/Makefile" ]] || die "extracted source tree not found at $SRC_DIR"
    touch "$SRC_DIR/.extracted"
fi

# --- 2b. reflect2 1.0.2 over the vendored 1.0.1 ------------------------------------------------
# 1.20 vendors github.com/modern-go/reflect2 v1.0.1, whose map iteration links to the runtime's
# pre-Go-1.18 mapiterinit: built with Go 1.19, the API server dies (SIGSEGV in mapiterinit,
# from json-iterator) on the first create of ANY custom resource. 1.0.2 (Debian's
# golang-github-modern-go-reflect2-dev) is the upstream fix, same API.
REFLECT2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2
[[ -f "$REFLECT2_SRC/go_above_118.go" ]] || die "reflect2 1.0.2 source missing at $REFLECT2_SRC"
rsync -a --delete --exclude '*_test.go' --exclude 'test*/' "$REFLECT2_SRC/" \
    "$SRC_DIR/vendor/github.com/modern-go/reflect2/" || die "cannot copy reflect2 into the vendor tree"

# --- 3. build (GOPATH mode, offline, two parallel jobs) ----------------------------------------
export PATH="$GO_ROOT/bin:$PATH"
# GOFLAGS stays empty: 1.20's hack/lib/golang.sh pastes it into the build tags. Parallelism is
# Go's default (one compile per core), which keeps memory near 2 GiB on 2 cores.
unset GOFLAGS
export GO111MODULE=off GOPROXY=off GOTOOLCHAIN=local
export GOCACHE="$CACHE/work/gocache"
export KUBE_GIT_VERSION="$K8S_VERSION" KUBE_GIT_TREE_STATE=clean KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20
export KUBE_VERBOSE=1
cd "$SRC_DIR"
log "go: $(go version); building in $SRC_DIR"
make generated_files >"$CACHE/work/generated_files.log" 2>&1 \
    || { tail -n 40 "$CACHE/work/generated_files.log" >&2; die "make generated_files failed (log: $CACHE/work/generated_files.log)"; }
WHAT=""
for c in "${COMPONENTS[@]}"; do WHAT+="cmd/$c "; done
make WHAT="${WHAT% }" >"$CACHE/work/build.log" 2>&1 \
    || { tail -n 40 "$CACHE/work/build.log" >&2; die "make WHAT=${WHAT% } failed (log: $CACHE/work/build.log)"; }
for c in "${COMPONENTS[@]}"; do
    out="$SRC_DIR/_output/local/bin/linux/amd64/$c"
    [[ -x "$out" ]] || out=$(find "$SRC_DIR/_output" -type f -name "$c" -perm -u+x | head -n1)
    [[ -n "$out" && -x "$out" ]] || die "built binary $c not found under $SRC_DIR/_output"
    cp -f "$out" "$BIN/$c.tmp" && mv -f "$BIN/$c.tmp" "$BIN/$c"
done

echo "$RECIPE" >"$BIN/.recipe"
cache_complete || die "cache $BIN incomplete after build"
"$BIN/kube-apiserver" --version >&2 || die "built kube-apiserver does not run"
# The source tree and Go cache are several GiB; only the binaries are worth keeping.
rm -rf "$CACHE/work" "$APT_DIR"
log "build finished in $(( $(date +%s) - START ))s; binaries in $BIN"
