#!/usr/bin/env bash
# Resolve (and build when missing) every binary the local control plane needs, and print one
# directory that holds them all, suitable for KUBEBUILDER_ASSETS.
#
# Resolution order per binary: TEST_ASSET_<NAME> (e.g. TEST_ASSET_KUBE_APISERVER), then
# $KUBEBUILDER_ASSETS/<name>, then the build cache below. A group of binaries is built only when
# one of its members is not found, so users with setup-envtest binaries build only what envtest
# lacks. Each group is built from a wrapper module under hack/ (go.mod + go.sum are committed),
# under a lock, into a temporary directory that is moved into place with a completion stamp.
#
# Environment:
#   TESTBIN_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/odh-training-functions)
#   TESTBIN_ONLY    space-separated group names to resolve (default: all default groups)
#   TESTBIN_EXTRA   space-separated optional groups to resolve as well as the default ones
#                   (training-operator: the upstream Go operator, a benchmark-only baseline;
#                   trainer and jobset: the upstream controllers the Trainer deploys;
#                   promtool: the check of the alerting rules and the dashboard)
# Output: the assembled directory on stdout; progress on stderr.
set -euo pipefail

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/odh-training-functions}
mkdir -p "$cache_root"

K8S_VERSION=v1.35.4
ldflags_k8s() {
  local major minor flags p
  major=$(echo "$K8S_VERSION" | sed -E 's/^v([0-9]+)\..*/\1/')
  minor=$(echo "$K8S_VERSION" | sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/')
  flags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags="$flags -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    flags="$flags -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}

# group -> "module dir|binary:package ..."
declare -A GROUP_DIR=(
  [etcd]=etcd-testbin
  [kubernetes]=k8s-testbin
  [kwok]=tools/kwok
  [kustomize]=tools/kustomize
  [knative]=tools/knative-adapter
  [crds]=crds
  [training-operator]=tools/training-operator
  [trainer]=tools/trainer
  [jobset]=tools/jobset
  [promtool]=tools/promtool
)
declare -A GROUP_BINS=(
  [etcd]="etcd:go.etcd.io/etcd/server/v3"
  [kubernetes]="kube-apiserver:k8s.io/kubernetes/cmd/kube-apiserver kube-controller-manager:k8s.io/kubernetes/cmd/kube-controller-manager kube-scheduler:k8s.io/kubernetes/cmd/kube-scheduler kubectl:k8s.io/kubernetes/cmd/kubectl"
  [kwok]="kwok:sigs.k8s.io/kwok/cmd/kwok"
  [kustomize]="kustomize:sigs.k8s.io/kustomize/kustomize/v5"
  [knative]="apiserver_receive_adapter:knative.dev/eventing/cmd/apiserver_receive_adapter eventing_controller:knative.dev/eventing/cmd/controller eventing_webhook:knative.dev/eventing/cmd/webhook mtchannel_broker:knative.dev/eventing/cmd/mtchannel_broker broker_ingress:knative.dev/eventing/cmd/broker/ingress broker_filter:knative.dev/eventing/cmd/broker/filter imc_controller:knative.dev/eventing/cmd/in_memory/channel_controller imc_dispatcher:knative.dev/eventing/cmd/in_memory/channel_dispatcher mtping:knative.dev/eventing/cmd/mtping"
  [crds]=""
  [training-operator]="training-operator:github.com/kubeflow/training-operator/cmd/training-operator.v1"
  [trainer]="trainer-controller-manager:github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
  [jobset]="jobset-controller-manager:sigs.k8s.io/jobset"
  [promtool]="promtool:github.com/prometheus/prometheus/cmd/promtool"
)
ALL_GROUPS="etcd kubernetes kwok kustomize knative crds"
# Built only when named in TESTBIN_ONLY or TESTBIN_EXTRA: the Go training-operator (a
# benchmark-only baseline), and the upstream Trainer controller (the version the Trainer's
# manifests deploy) and JobSet controller (the version their third-party JobSet deploys),
# which the local kubelet runs in place of their Deployments' images; promtool, which checks
# the alerting rules and the dashboard's expressions (config/monitoring).
OPTIONAL_GROUPS="training-operator trainer jobset promtool"

# Third-party CRDs the product depends on or is deployed with, taken from their Go modules
# (data only, no build): "module@version:directory[:file glob]".
CRD_MODULES="sigs.k8s.io/jobset@v0.12.0:config/components/crd/bases
knative.dev/serving@v0.49.0:config/core/300-resources
knative.dev/eventing@v0.49.2:config/core/resources
github.com/prometheus-operator/prometheus-operator@v0.80.1:example/prometheus-operator-crd:monitoring.coreos.com_podmonitors.yaml
github.com/prometheus-operator/prometheus-operator@v0.80.1:example/prometheus-operator-crd:monitoring.coreos.com_prometheusrules.yaml
volcano.sh/volcano@v1.10.0:config/crd/volcano/bases:scheduling.volcano.sh_podgroups.yaml
sigs.k8s.io/scheduler-plugins@v0.28.9:config/crd/bases:scheduling.x-k8s.io_podgroups.yaml"
# Knative Eventing's own install manifests, taken as data from the module the knative group
# builds (same version): "directory in the module:directory under knative-eventing/". The
# local dev stack applies them (tools/devstack/devstack/knative.py) and runs the Deployments' images.
KNATIVE_CONFIG="config/core:core
config/brokers/mt-channel-broker:mt-channel-broker
config/channels/in-memory-channel:in-memory-channel
third_party/eventing-integrations-latest:integrations"
groups="${TESTBIN_ONLY:-$ALL_GROUPS} ${TESTBIN_EXTRA:-}"
for group in $groups; do
  if [ -z "${GROUP_DIR[$group]:-}" ]; then
    echo "ensure-testbin: unknown group '$group' (groups: $ALL_GROUPS; optional: $OPTIONAL_GROUPS)" >&2
    exit 2
  fi
done

log() { echo "ensure-testbin: $*" >&2; }

# A binary supplied by the user: TEST_ASSET_<UPPER_NAME> or $KUBEBUILDER_ASSETS/<name>.
user_binary() {
  local name=$1 var
  var="TEST_ASSET_$(echo "$name" | tr 'a-z-' 'A-Z_')"
  if [ -n "${!var:-}" ] && [ -x "${!var}" ]; then echo "${!var}"; return 0; fi
  if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/$name" ]; then
    echo "$KUBEBUILDER_ASSETS/$name"; return 0
  fi
  return 1
}

group_key() {
  local group=$1 dir=$here/${GROUP_DIR[$1]}
  {
    go version
    if [ "$group" = crds ]; then echo "$CRD_MODULES"; else cat "$dir/go.mod" "$dir/go.sum"; fi
    [ "$group" = knative ] && echo "$KNATIVE_CONFIG"
    echo "${GROUP_BINS[$group]}"
    [ "$group" = kubernetes ] && ldflags_k8s
    echo "flags:-trimpath -tags=selinux,notest,grpcnotrace -pgo=off"
  } | sha256sum | cut -c1-12
}

build_group() {
  local group=$1 out=$2 dir=$here/${GROUP_DIR[$1]} entry name pkg ldflags tags start
  ldflags="-s -w"; tags=""
  if [ "$group" = kubernetes ]; then ldflags=$(ldflags_k8s); tags="-tags=selinux,notest,grpcnotrace"; fi
  for entry in ${GROUP_BINS[$group]}; do
    name=${entry%%:*}; pkg=${entry#*:}
    start=$(date +%s)
    log "building $name ($pkg) ..."
    (cd "$dir" && go build -trimpath $tags -pgo=off -ldflags "$ldflags" -o "$out/$name" "$pkg")
    log "built $name in $(( $(date +%s) - start ))s"
  done
  if [ "$group" = crds ]; then
    local spec module subdir moddir target pattern
    mkdir -p "$out/crds"
    for spec in $CRD_MODULES; do
      IFS=: read -r module subdir pattern <<< "$spec"
      pattern=${pattern:-*.yaml}
      moddir=$(cd "$out" && GOFLAGS= go mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
      [ -d "$moddir/$subdir" ] || { log "no $subdir in $module"; return 1; }
      target=$out/crds/$(basename "${module%@*}")
      mkdir -p "$target"
      cp "$moddir/$subdir"/$pattern "$target/"
    done
    chmod -R u+w "$out/crds"
  fi
  if [ "$group" = training-operator ]; then
    # The operator's own CRDs (PyTorchJob, TFJob, ... at the built version), from its module.
    local moddir
    moddir=$(cd "$dir" && go list -m -f '{{.Dir}}' github.com/kubeflow/training-operator)
    mkdir -p "$out/training-operator-crds"
    cp "$moddir"/manifests/base/crds/kubeflow.org_*.yaml "$out/training-operator-crds/"
    chmod -R u+w "$out/training-operator-crds"
  fi
  if [ "$group" = jobset ]; then
    # JobSet's own install (CRD, RBAC, webhooks, Deployment; its release manifest is a render
    # of config/default), from the module the binary was built from.
    local moddir
    moddir=$(cd "$dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)
    mkdir -p "$out/jobset-config"
    cp -r "$moddir/config/." "$out/jobset-config/"
    chmod -R u+w "$out/jobset-config"
  fi
  if [ "$group" = knative ]; then
    local moddir spec from to
    moddir=$(cd "$dir" && go list -m -f '{{.Dir}}' knative.dev/eventing)
    for spec in $KNATIVE_CONFIG; do
      IFS=: read -r from to <<< "$spec"
      [ -d "$moddir/$from" ] || { log "no $from in knative.dev/eventing"; return 1; }
      mkdir -p "$out/knative-eventing/$to"
      (cd "$moddir/$from" && find . -name '*.yaml' -exec cp --parents {} "$out/knative-eventing/$to/" \;)
    done
    chmod -R u+w "$out/knative-eventing"
  fi
  if [ "$group" = kwok ]; then
    # kwok has no built-in stages; keep the module's stage files next to the binary.
    local moddir
    moddir=$(cd "$dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
    mkdir -p "$out/kwok-stages"
    cp -r "$moddir/kustomize/stage/." "$out/kwok-stages/"
    chmod -R u+w "$out/kwok-stages"
  fi
  if [ "$group" = crds ]; then return 0; fi
  (cd "$dir" && for b in "$out"/*; do
     if [ -f "$b" ] && [ -x "$b" ]; then go version -m "$b"; fi
   done) > "$out/BUILD-INFO"
}

# How long the group's last cold build took: on this machine (an earlier build of another
# version), else as recorded in bench/results/devstack.json on a 2-core machine.
last_build_seconds() {
  local group=$1 file seconds=""
  for file in "$cache_root"/build/"$group"-*/BUILD-SECONDS; do
    [ -f "$file" ] && seconds="$(cat "$file") s here"
  done
  if [ -z "$seconds" ] && [ -f "$here/../bench/results/devstack.json" ]; then
    seconds=$(sed -n "s/.*\"$group\": \([0-9][0-9]*\).*/\1/p" "$here/../bench/results/devstack.json" | head -1)
    [ -n "$seconds" ] && seconds="$seconds s on a 2-core machine"
  fi
  echo "${seconds:-an unknown time}"
}

ensure_group() {
  local group=$1 key target tmp lock start
  key=$(group_key "$group")
  target=$cache_root/build/$group-$key
  if [ -f "$target/.complete" ]; then echo "$target"; return 0; fi
  mkdir -p "$cache_root/build"
  lock=$cache_root/build/$group.lock
  exec 9>"$lock"
  flock 9
  if [ ! -f "$target/.complete" ]; then
    tmp=$(mktemp -d "$cache_root/build/.$group-XXXXXX")
    start=$(date +%s)
    log "group $group: building (its last cold build took $(last_build_seconds "$group"))"
    if ! build_group "$group" "$tmp"; then
      rm -rf "$tmp"
      log "FAILED to build group '$group' (module hack/${GROUP_DIR[$group]})."
      log "Fix the build, or point KUBEBUILDER_ASSETS / TEST_ASSET_* at prebuilt binaries."
      exit 1
    fi
    echo "$(( $(date +%s) - start ))" > "$tmp/BUILD-SECONDS"
    touch "$tmp/.complete"
    rm -rf "$target"
    mv "$tmp" "$target"
    log "group $group ready in $target ($(cat "$target/BUILD-SECONDS")s)"
  fi
  flock -u 9
  echo "$target"
}

# Data directories a group provides beside its binaries.
declare -A GROUP_DATA=([kwok]=kwok-stages [crds]=crds [training-operator]=training-operator-crds
  [knative]=knative-eventing [jobset]=jobset-config)

declare -A resolved=()
for group in $groups; do
  missing=0
  for entry in ${GROUP_BINS[$group]}; do
    name=${entry%%:*}
    if path=$(user_binary "$name"); then resolved[$name]=$path; else missing=1; fi
  done
  data=${GROUP_DATA[$group]:-}
  if [ -n "$data" ]; then
    if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -d "$KUBEBUILDER_ASSETS/$data" ]; then
      resolved[$data]=$KUBEBUILDER_ASSETS/$data
    else
      missing=1
    fi
  fi
  if [ "$missing" = 1 ]; then
    dir=$(ensure_group "$group")
    for entry in ${GROUP_BINS[$group]}; do
      name=${entry%%:*}
      [ -n "${resolved[$name]:-}" ] || resolved[$name]=$dir/$name
    done
    if [ -n "$data" ] && [ -z "${resolved[$data]:-}" ]; then resolved[$data]=$dir/$data; fi
  fi
done

# Assemble one flat directory of symlinks, keyed by what it points at.
manifest=$(for k in "${!resolved[@]}"; do echo "$k=${resolved[$k]}"; done | sort)
assembled=$cache_root/bin/$(echo "$manifest" | sha256sum | cut -c1-12)
if [ ! -f "$assembled/.complete" ]; then
  tmp=$(mktemp -d "$cache_root/.bin-XXXXXX")
  for k in "${!resolved[@]}"; do ln -s "${resolved[$k]}" "$tmp/$k"; done
  echo "$manifest" > "$tmp/MANIFEST"
  touch "$tmp/.complete"
  mkdir -p "$cache_root/bin"
  if ! mv -T "$tmp" "$assembled" 2>/dev/null; then rm -rf "$tmp"; fi
fi
echo "$assembled"
