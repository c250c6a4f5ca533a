#!/usr/bin/env bash
# Builds the local control plane's binaries (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd,
# kwok) from the Go module proxy and caches them by version outside the checkout:
#
#   ${GPUSCHED_CACHE:-~/.cache/gpusched}/bin/<component>-<version>/<binary>
#
# Each component is one wrapper module under tools/<component>/ whose go.mod pins the version
# (the single source of truth; gpusched.devcluster reads the same go.mod). A component is
# rebuilt only when its go.mod/go.sum or the build flags change: a .stamp file in the cache
# directory records their hash. Usage: tools/build.sh [k8s|etcd|kwok ...]  (default: all)
set -euo pipefail

TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${GPUSCHED_CACHE:-${HOME:-/tmp}/.cache/gpusched}"
BIN_ROOT="$CACHE/bin"
MIN_GO_MINOR=26 # the wrapper modules say `go 1.26.0`; kubernetes v1.36 needs it too

die() {
  echo "tools/build.sh: error: $*" >&2
  exit 1
}

if ! command -v go >/dev/null 2>&1; then
  die "no Go toolchain on PATH ('go' not found). Install Go >= 1.$MIN_GO_MINOR (e.g. in
  /usr/local/go) and put its bin/ directory on PATH, then run 'make bins' again."
fi
go_version="$(go env GOVERSION)" # e.g. go1.26.8
go_minor="$(sed -E 's/^go1\.([0-9]+).*/\1/' <<<"$go_version")"
if ! [[ "$go_minor" =~ ^[0-9]+$ ]] || ((go_minor < MIN_GO_MINOR)); then
  die "found $go_version, need Go >= 1.$MIN_GO_MINOR. Upgrade Go, or export
  GOTOOLCHAIN=go1.27.3 so the go command fetches that toolchain from the module proxy."
fi

# The version of the main dependency a wrapper module builds, read from its go.mod.
module_version() { # dir module-path
  awk -v m="$2" '$1 == "require" && $2 == m { print $3 } $1 == m { print $2 }' "$1/go.mod" |
    head -n1
}

# CGO off gives static binaries that run on any Linux and skips the C toolchain; -trimpath,
# -s -w keep the build reproducible and the link step (the slow, uncached part) short.
export CGO_ENABLED=0
BASE_LDFLAGS="-s -w"

build_component() { # name module-path ldflags "pkg=binary ..."
  local name="$1" module="$2" ldflags="$3" targets="$4"
  local src="$TOOLS_DIR/$name"
  local version
  version="$(module_version "$src" "$module")"
  [[ -n "$version" ]] || die "cannot read the version of $module from $src/go.mod"
  local dest="$BIN_ROOT/$name-$version"
  local stamp
  stamp="$(cat "$src/go.mod" "$src/go.sum" <(echo "$ldflags $targets") | sha256sum | cut -c1-16)"

  local complete=1 target
  for target in $targets; do
    [[ -x "$dest/${target#*=}" ]] || complete=0
  done
  if ((complete)) && [[ "$(cat "$dest/.stamp" 2>/dev/null)" == "$stamp" ]]; then
    echo "tools/build.sh: $name $version: cached in $dest"
    STEP=$((STEP + $(wc -w <<<"$targets")))
    return 0
  fi

  echo "tools/build.sh: $name $version: building; the first build on a new machine takes" \
    "minutes (about 8 CPU-minutes for all six binaries), later runs reuse the cache"
  local started=$SECONDS tmp="$dest.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  # An interrupted build must not leave a half-filled cache directory behind, nor the
  # progress printer running.
  trap "rm -rf '$tmp'; stop_progress" EXIT
  local pkg bin log="$tmp/build.log"
  for target in $targets; do
    pkg="${target%=*}"
    bin="${target#*=}"
    STEP=$((STEP + 1))
    echo "tools/build.sh: [$STEP/$TOTAL_STEPS] building $bin ($name $version)..."
    start_progress "$bin"
    if ! (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$tmp/$bin" "$pkg") \
      >"$log" 2>&1; then
      stop_progress
      tail -n 30 "$log" >&2
      die "building $bin ($pkg) for $name $version failed; the last lines are above.
  If the go command could not download a module, check that the Go module proxy is
  reachable (go env GOPROXY) and retry 'make bins'."
    fi
    stop_progress
  done
  rm -f "$log"
  echo "$stamp" >"$tmp/.stamp"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  trap - EXIT
  echo "tools/build.sh: $name $version: built in $((SECONDS - started)) s -> $dest"
}

# A line every PROGRESS_SECONDS while one `go build` runs (kube-apiserver alone takes
# minutes on a fresh machine): the build is alive, and how long this binary has taken.
PROGRESS_SECONDS=15
PROGRESS_PID=""
start_progress() { # binary
  local bin="$1" since
  since=$(date +%s)
  (
    while sleep "$PROGRESS_SECONDS"; do
      echo "tools/build.sh:   still building $bin: $(($(date +%s) - since)) s so far"
    done
  ) &
  PROGRESS_PID=$!
}
stop_progress() {
  if [[ -n "$PROGRESS_PID" ]]; then
    kill "$PROGRESS_PID" 2>/dev/null || true
    wait "$PROGRESS_PID" 2>/dev/null || true
    PROGRESS_PID=""
  fi
}

build_k8s() {
  local v
  v="$(module_version "$TOOLS_DIR/k8s" k8s.io/kubernetes)"
  local major="${v#v}" minor
  minor="${major#*.}"
  minor="${minor%%.*}"
  major="${major%%.*}"
  # Without these the binaries call themselves v0.0.0-master: kubectl warns about version
  # skew and /version misreports. -X only changes the link, so the compile cache still hits.
  local cb=k8s.io/component-base/version
  local ld="$BASE_LDFLAGS -X $cb.gitVersion=$v -X $cb.gitMajor=$major -X $cb.gitMinor=$minor"
  ld="$ld -X $cb.gitTreeState=clean"
  build_component k8s k8s.io/kubernetes "$ld" \
    "k8s.io/kubernetes/cmd/kube-apiserver=kube-apiserver
     k8s.io/kubernetes/cmd/kube-scheduler=kube-scheduler
     k8s.io/kubernetes/cmd/kube-controller-manager=kube-controller-manager
     k8s.io/kubernetes/cmd/kubectl=kubectl"
}

build_etcd() {
  build_component etcd go.etcd.io/etcd/server/v3 "$BASE_LDFLAGS" "go.etcd.io/etcd/server/v3=etcd"
}

build_kwok() {
  local v
  v="$(module_version "$TOOLS_DIR/kwok" sigs.k8s.io/kwok)"
  build_component kwok sigs.k8s.io/kwok "$BASE_LDFLAGS -X sigs.k8s.io/kwok/pkg/consts.Version=${v#v}" \
    "sigs.k8s.io/kwok/cmd/kwok=kwok"
}

# Two builds at once (two checkouts, or make -j) would race on the final move.
mkdir -p "$BIN_ROOT"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$BIN_ROOT/.lock"
  flock 9
fi

components=("$@")
((${#components[@]})) || components=(etcd kwok k8s)
# Progress is counted in binaries: k8s has four, etcd and kwok one each.
STEP=0
TOTAL_STEPS=0
for c in "${components[@]}"; do
  case "$c" in
  k8s) TOTAL_STEPS=$((TOTAL_STEPS + 4)) ;;
  etcd | kwok) TOTAL_STEPS=$((TOTAL_STEPS + 1)) ;;
  esac
done
total_started=$SECONDS
for c in "${components[@]}"; do
  case "$c" in
  k8s | etcd | kwok) "build_$c" ;;
  *) die "unknown component '$c' (expected k8s, etcd or kwok)" ;;
  esac
done
echo "tools/build.sh: done in $((SECONDS - total_started)) s (cache: $BIN_ROOT)"
