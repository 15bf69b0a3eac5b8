# Sourced by hack/build-control-plane and hack/build-monitoring: log and build, shared.
# The sourcing script sets $script (its name, for messages) and $started (its start, epoch seconds).
# shellcheck shell=bash

log() { printf '[%s %4ss] %s\n' "$script" "$(( $(date +%s) - started ))" "$*"; }

# build NAME MODULE_DIR LDFLAGS PKG... : go build -v into $out (default $bin_dir), printing
# progress as packages compile.
build() {
  local name=$1 dir=$2 ldflags=$3; shift 3
  local out=${out:-$bin_dir}
  local missing=()
  for pkg in "$@"; do
    local b; b=$(basename "$pkg")
    # a module's major-version suffix (k8s.io/kube-state-metrics/v2): go build names it after the module
    if [[ $b =~ ^v[0-9]+$ ]]; then b=$(basename "$(dirname "$pkg")"); fi
    [[ -x "$out/$b" ]] || missing+=("$pkg")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then log "$name: cached in $out"; return; fi
  log "$name: resolving modules for ${missing[*]##*/}"
  (cd "$dir" && go mod download)
  local total; total=$(cd "$dir" && go list -deps "${missing[@]}" | wc -l)
  log "$name: compiling up to $total packages (cold builds take minutes; cached packages are skipped)"
  local tmp; tmp=$(mktemp -d "$out/.build.XXXXXX")
  local n=0 last=0
  (cd "$dir" && go build -v -ldflags "-s -w $ldflags" -o "$tmp/" "${missing[@]}" 2>&1) |
    while IFS= read -r line; do
      n=$((n + 1))
      now=$(date +%s)
      if (( now - last >= 15 )); then
        last=$now; log "$name: $n/$total packages compiled, now $line"
      fi
      case "$line" in *.go:[0-9]*|"# "*|go:\ *) echo "$line" >&2 ;; esac
    done
  local rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 ]]; then rm -rf "$tmp"; echo "$script: $name failed (exit $rc)" >&2; exit "$rc"; fi
  mv "$tmp"/* "$out/"; rmdir "$tmp"
  log "$name: built $(cd "$out" && ls | tr '\n' ' ')"
}
