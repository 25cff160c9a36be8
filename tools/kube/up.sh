#!/usr/bin/env bash
# Reference recipe: a real, single-node Kubernetes control plane with no
# nodes -- etcd, kube-apiserver, kube-controller-manager -- on loopback, in a
# work directory, plus a smoke test that proves the parts an operator relies
# on actually work.
#
#   tools/kube/up.sh [--wait] [--no-checks] [WORKDIR]
#
#   WORKDIR      where everything lives (created; must be empty or absent).
#                Default: a new directory under ${TMPDIR:-/tmp}.
#   --wait       after the checks, keep running until interrupted (Ctrl-C,
#                SIGTERM); use WORKDIR/env for KUBECONFIG.
#   --no-checks  skip the smoke test.
#
#   KUBE_BIN_DIR  directory with etcd, kube-apiserver, kube-controller-manager;
#                 default: the one tools/kube/build.sh prints (building it if
#                 needed).
#   KUBECTL       kubectl to use (default: kubectl on PATH).
#
# Everything this script starts is stopped when it exits, whatever the reason
# (normal end, failed check, Ctrl-C, SIGTERM); it cannot clean up after
# SIGKILL. There is no kubelet and no scheduler: Pods are created and stay
# Pending, which is all the controllers under test need.
#
# WORKDIR layout after start:
#   pki/     ca.{crt,key}          CA of this cluster (serving cert; root CA
#                                  that kcm publishes to namespaces and
#                                  service-account token Secrets)
#            apiserver.{crt,key}   serving cert for 127.0.0.1/localhost and the
#                                  in-cluster names of the kubernetes Service
#            sa.{key,pub}          service-account token signing key pair
#            tokens.csv            static bearer tokens (admin, kcm)
#   etcd/                          etcd data directory
#   admin.kubeconfig               user "windlass-admin", group system:masters
#   kube-controller-manager.kubeconfig  user system:kube-controller-manager
#   logs/{etcd,kube-apiserver,kube-controller-manager}.log
#   env                            KUBECONFIG=..., ports; source it
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

wait_after=false
checks=true
work=
while (($#)); do
    case $1 in
        --wait) wait_after=true ;;
        --no-checks) checks=false ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "up.sh: unknown option $1" >&2; exit 2 ;;
        *) [[ -z $work ]] || { echo "up.sh: only one WORKDIR" >&2; exit 2; }; work=$1 ;;
    esac
    shift
done

log() { printf '[up.sh %6.1fs] %s\n' "$(elapsed "$t0")" "$*" >&2; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
die() { log "FAILED: $*"; exit 1; }
t0=$(now)

kubectl_bin=${KUBECTL:-kubectl}
command -v "$kubectl_bin" >/dev/null || die "kubectl not found (set KUBECTL)"
command -v openssl >/dev/null || die "openssl not found"
command -v curl >/dev/null || die "curl not found"

if [[ -n ${KUBE_BIN_DIR:-} ]]; then
    bin=$KUBE_BIN_DIR
else
    bin=$("$here/build.sh" | tail -n 1)
fi
for b in etcd kube-apiserver kube-controller-manager; do
    [[ -x $bin/$b ]] || die "$bin/$b is missing; run tools/kube/build.sh"
done

if [[ -z $work ]]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/windlass-kube.XXXXXX")
else
    mkdir -p "$work"
    [[ -z $(ls -A "$work") ]] || die "$work is not empty"
fi
work=$(cd "$work" && pwd)
pki=$work/pki
mkdir -p "$pki" "$work/logs"
log "work dir $work, binaries $bin"

# ---------------------------------------------------------------- cleanup --
# Children are started in the background by this (non-interactive) shell, so
# they ignore SIGINT from the terminal; this trap is what stops them. They are
# stopped in reverse start order: controller-manager, apiserver, etcd.
pids=()
names=()
cleanup() {
    local rc=$? i pid deadline
    # A second Ctrl-C or SIGTERM (a supervisor that signals the process group, say) must not
    # cut the cleanup short and leave a component running.
    trap - EXIT
    trap "" INT TERM
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        pid=${pids[i]}
        kill -0 "$pid" 2>/dev/null || continue
        # Kubernetes components shut down gracefully on the first SIGTERM and
        # exit at once on a second one; SIGKILL is the last resort.
        kill -TERM "$pid" 2>/dev/null || true
        deadline=$((SECONDS + 10))
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            log "${names[i]} (pid $pid) still running 10s after SIGTERM; sending SIGTERM again"
            kill -TERM "$pid" 2>/dev/null || true
            deadline=$((SECONDS + 5))
            while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        fi
        if kill -0 "$pid" 2>/dev/null; then
            log "${names[i]} (pid $pid) still running; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
        log "stopped ${names[i]} (pid $pid)"
    done
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start() { # <name> <binary> <args...>: start in background, log to logs/<name>.log
    local name=$1
    shift
    "$@" >"$work/logs/$name.log" 2>&1 &
    pids+=($!)
    names+=("$name")
    log "started $name (pid $!)"
}

# wait_for <what> <seconds> <pid> <command...>: poll until the command
# succeeds; give up early if the process <pid> died.
wait_for() {
    local what=$1 secs=$2 pid=$3
    shift 3
    local deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if ! kill -0 "$pid" 2>/dev/null; then
            die "$what: process $pid exited; see $work/logs"
        fi
        ((SECONDS < deadline)) || die "$what: not after ${secs}s; see $work/logs"
        sleep 0.2
    done
}

# ------------------------------------------------------------------ ports --
# Random ports in 20000-32767 (below Linux's default ephemeral range, so no
# outgoing connection holds one by chance) that nothing listens on now.
taken=" "
pick_port() { # <var>
    local p
    while :; do
        p=$((20000 + RANDOM % 12768))
        [[ $taken == *" $p "* ]] && continue
        if [[ -n $(ss -Htln "sport = :$p" 2>/dev/null) ]]; then continue; fi
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
        taken+="$p "
        printf -v "$1" %s "$p"
        return
    done
}
pick_port etcd_client_port
pick_port etcd_peer_port
pick_port apiserver_port
pick_port kcm_port

# -------------------------------------------------------------------- pki --
t_pki=$(now)
ossl() { openssl "$@" 2>>"$work/logs/openssl.log"; }
# Cluster CA (EC P-256: instant to generate).
ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/ca.key"
ossl req -x509 -new -key "$pki/ca.key" -subj "/CN=windlass-local-ca" -days 3650 \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$pki/ca.crt"
# apiserver serving cert: the names clients use from the host (127.0.0.1,
# localhost) and the ones in-cluster clients would use (the kubernetes
# Service, first IP of --service-cluster-ip-range).
ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/apiserver.key"
ossl req -new -key "$pki/apiserver.key" -subj "/CN=kube-apiserver" -out "$pki/apiserver.csr"
cat >"$pki/apiserver.ext" <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
ossl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 3650 -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt"
# Service-account token key pair: the apiserver signs tokens with sa.key
# (TokenRequest, i.e. 'kubectl create token' and projected tokens) and
# verifies them with sa.pub; the controller-manager signs legacy token
# Secrets with the same sa.key. RSA so tokens are RS256, which every JWT
# consumer accepts.
ossl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key"
ossl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
# Static bearer tokens: token,user,uid,"groups".
admin_token=$(openssl rand -hex 32)
kcm_token=$(openssl rand -hex 32)
cat >"$pki/tokens.csv" <<EOF
$admin_token,windlass-admin,windlass-admin,"system:masters"
$kcm_token,system:kube-controller-manager,system:kube-controller-manager
EOF
chmod 600 "$pki"/*.key "$pki/tokens.csv"
log "pki made in $(elapsed "$t_pki")s"

# Kubeconfigs (kubectl writes them; the CA is embedded).
server=https://127.0.0.1:$apiserver_port
write_kubeconfig() { # <file> <user> <token>
    local kc=(--kubeconfig "$1")
    "$kubectl_bin" config "${kc[@]}" set-cluster windlass --server="$server" \
        --certificate-authority="$pki/ca.crt" --embed-certs=true >/dev/null
    "$kubectl_bin" config "${kc[@]}" set-credentials "$2" --token="$3" >/dev/null
    "$kubectl_bin" config "${kc[@]}" set-context windlass --cluster=windlass --user="$2" >/dev/null
    "$kubectl_bin" config "${kc[@]}" use-context windlass >/dev/null
    chmod 600 "$1"
}
admin_kc=$work/admin.kubeconfig
kcm_kc=$work/kube-controller-manager.kubeconfig
write_kubeconfig "$admin_kc" windlass-admin "$admin_token"
write_kubeconfig "$kcm_kc" system:kube-controller-manager "$kcm_token"

# ------------------------------------------------------------------- etcd --
etcd_url=http://127.0.0.1:$etcd_client_port
peer_url=http://127.0.0.1:$etcd_peer_port
t_etcd=$(now)
etcd_args=(
    --name=windlass
    --data-dir="$work/etcd"
    --listen-client-urls="$etcd_url"
    --advertise-client-urls="$etcd_url"
    --listen-peer-urls="$peer_url"
    --initial-advertise-peer-urls="$peer_url"
    --initial-cluster="windlass=$peer_url"
    --initial-cluster-state=new
    --unsafe-no-fsync
    --log-level=warn
)
start etcd "$bin/etcd" "${etcd_args[@]}"
etcd_healthy() { curl -sf "$etcd_url/health" | grep -q '"health":"true"'; }
wait_for "etcd /health" 30 "${pids[-1]}" etcd_healthy
log "etcd healthy at $etcd_url after $(elapsed "$t_etcd")s"

# --------------------------------------------------------- kube-apiserver --
t_api=$(now)
apiserver_args=(
    --etcd-servers="$etcd_url"
    --bind-address=127.0.0.1
    --secure-port="$apiserver_port"
    --advertise-address=127.0.0.1
    --endpoint-reconciler-type=none
    --tls-cert-file="$pki/apiserver.crt"
    --tls-private-key-file="$pki/apiserver.key"
    --service-cluster-ip-range=10.0.0.0/24
    --token-auth-file="$pki/tokens.csv"
    --client-ca-file="$pki/ca.crt"
    --authorization-mode=Node,RBAC
    --enable-admission-plugins=NodeRestriction,PodSecurity
    --allow-privileged=true
    --service-account-issuer=https://kubernetes.default.svc.cluster.local
    --service-account-signing-key-file="$pki/sa.key"
    --service-account-key-file="$pki/sa.pub"
)
start kube-apiserver "$bin/kube-apiserver" "${apiserver_args[@]}"
# /readyz is readable without credentials (RBAC's system:public-info-viewer);
# --cacert also proves the serving certificate is what the kubeconfig trusts.
apiserver_ready() { [[ $(curl -s --cacert "$pki/ca.crt" "$server/readyz") == ok ]]; }
wait_for "kube-apiserver /readyz" 120 "${pids[-1]}" apiserver_ready
api_ready=$(elapsed "$t_api")
log "kube-apiserver ready at $server: /readyz ok ${api_ready}s after its start ($(elapsed "$t0")s after up.sh start)"

# ------------------------------------------------ kube-controller-manager --
# The same list as windlass_kubeplane::CONTROLLERS (kubeplane/src/lib.rs).
controllers=(
    garbage-collector-controller
    namespace-controller
    serviceaccount-controller
    serviceaccount-token-controller
    root-ca-certificate-publisher-controller
    clusterrole-aggregation-controller
    deployment-controller
    replicaset-controller
    statefulset-controller
    job-controller
    cronjob-controller
    ttl-after-finished-controller
    persistentvolumeclaim-protection-controller
    disruption-controller
)
t_kcm=$(now)
kcm_args=(
    --kubeconfig="$kcm_kc"
    --authentication-kubeconfig="$kcm_kc"
    --authorization-kubeconfig="$kcm_kc"
    --authentication-skip-lookup
    --bind-address=127.0.0.1
    --secure-port="$kcm_port"
    --leader-elect=false
    --controllers="$(IFS=,; echo "${controllers[*]}")"
    --use-service-account-credentials=true
    --service-account-private-key-file="$pki/sa.key"
    --root-ca-file="$pki/ca.crt"
)
start kube-controller-manager "$bin/kube-controller-manager" "${kcm_args[@]}"
# kcm serves with a self-signed in-memory certificate, hence -k.
kcm_healthy() { [[ $(curl -sk "https://127.0.0.1:$kcm_port/healthz") == ok ]]; }
wait_for "kube-controller-manager /healthz" 60 "${pids[-1]}" kcm_healthy
log "kube-controller-manager healthy after $(elapsed "$t_kcm")s"

cat >"$work/env" <<EOF
export KUBECONFIG=$admin_kc
export WINDLASS_KUBE_SERVER=$server
export WINDLASS_KUBE_ETCD=$etcd_url
export WINDLASS_KUBE_CA=$pki/ca.crt
EOF

k() { "$kubectl_bin" --kubeconfig "$admin_kc" "$@"; }

# ------------------------------------------------------------ smoke test --
# until_ok <what> <seconds> <command...>: poll a condition that the
# controllers make true eventually.
until_ok() {
    local what=$1 secs=$2
    shift 2
    local t=$(now) deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "$what: not after ${secs}s"
        sleep 0.2
    done
    log "ok: $what (${secs}s allowed, took $(elapsed "$t")s)"
}
step() { echo; echo "=== $*"; }
names_of() { k get "$@" -o name; }
# absent <kubectl get args...>: the query succeeds and finds nothing (a failing
# kubectl, e.g. a connection error, does not count as "gone").
absent() {
    local out
    out=$(k get "$@" --ignore-not-found -o name) && [[ -z $out ]]
}
# count_is <n> <kubectl get args...>: the query succeeds and lists n objects.
count_is() {
    local n=$1 out
    shift
    out=$(k get "$@" -o name) && [[ $(grep -c . <<<"$out") -eq $n ]]
}

if $checks; then
    step "kubectl version / get ns"
    k version 2>&1 || true
    k get ns

    step "serviceaccount controller: default ServiceAccount in 'default' (kcm identity uses per-controller SA tokens)"
    until_ok "ServiceAccount default/default exists" 60 k -n default get sa default

    step "PodSecurity: privileged Pod refused in an enforce=restricted namespace"
    k create ns psa-restricted
    k label ns psa-restricted pod-security.kubernetes.io/enforce=restricted
    priv_pod() {
        cat <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: privileged}
spec:
  containers:
  - name: c
    image: registry.invalid/none:1
    securityContext: {privileged: true}
EOF
    }
    if out=$(priv_pod | k -n psa-restricted create -f - 2>&1); then
        die "privileged Pod was admitted into psa-restricted: $out"
    fi
    echo "$out"
    [[ $out == *"violates PodSecurity"* ]] || die "refused, but not by PodSecurity: $out"
    log "ok: privileged Pod refused by PodSecurity"
    k create ns psa-none
    priv_pod | k -n psa-none create -f -
    log "ok: the same Pod is admitted into an unlabelled namespace (so PodSecurity, not --allow-privileged, refused it)"

    step "ServiceAccount + token (TokenRequest API), root CA publisher, legacy token Secret"
    k create ns demo
    k -n demo create sa robot
    tok=$(k -n demo create token robot --duration=10m)
    echo "token: ${tok:0:40}... (${#tok} chars)"
    claims=$(cut -d. -f2 <<<"$tok" | tr '_-' '/+')
    while ((${#claims} % 4)); do claims+='='; done
    echo "claims: $(base64 -d <<<"$claims")"
    [[ $(base64 -d <<<"$claims") == *'"sub":"system:serviceaccount:demo:robot"'* ]] || die "unexpected token claims"
    k -n demo auth can-i list pods --token "$tok" || true  # a fresh SA may do nothing: expect "no"
    until_ok "ConfigMap demo/kube-root-ca.crt published" 30 k -n demo get cm kube-root-ca.crt
    k -n demo apply -f - <<'EOF'
apiVersion: v1
kind: Secret
metadata:
  name: robot-token
  annotations: {kubernetes.io/service-account.name: robot}
type: kubernetes.io/service-account-token
EOF
    secret_has_token() { [[ -n $(k -n demo get secret robot-token -o jsonpath='{.data.token}') ]]; }
    until_ok "legacy token Secret demo/robot-token filled by serviceaccount-token controller" 30 secret_has_token

    step "Deployment -> ReplicaSet -> Pods (deployment + replicaset controllers)"
    k -n demo create deployment web --image=registry.invalid/web:1 --replicas=2
    until_ok "ReplicaSet for deployment web" 30 count_is 1 -n demo rs -l app=web
    until_ok "2 Pods for deployment web" 30 count_is 2 -n demo pods -l app=web
    k -n demo get deploy,rs,pods -o wide

    step "StatefulSet -> Pod, Job -> Pod, CronJob accepted"
    k -n demo apply -f - <<'EOF'
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: c, image: registry.invalid/db:1}]}
EOF
    k -n demo create job once --image=registry.invalid/job:1
    k -n demo create cronjob tick --image=registry.invalid/job:1 --schedule='*/5 * * * *'
    until_ok "Pod db-0 from StatefulSet db" 30 k -n demo get pod db-0
    until_ok "Pod from Job once" 30 count_is 1 -n demo pods -l job-name=once
    k -n demo get sts,job,cronjob,pods

    step "Garbage collector: delete the Deployment, its ReplicaSet and Pods go"
    rs=$(names_of -n demo rs -l app=web)
    echo "owner chain: deployment.apps/web -> $rs -> $(names_of -n demo pods -l app=web | tr '\n' ' ')"
    k -n demo delete deployment web --wait=false
    until_ok "ReplicaSet of web deleted by GC" 60 absent -n demo rs -l app=web
    until_ok "Pods of web deleted by GC" 60 absent -n demo pods -l app=web
    echo "also with an explicit ownerReference: ConfigMap owned by a ConfigMap"
    k -n demo create cm owner
    uid=$(k -n demo get cm owner -o jsonpath='{.metadata.uid}')
    k -n demo apply -f - <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: "$uid"}]
EOF
    k -n demo delete cm owner
    until_ok "ConfigMap dependent deleted by GC" 60 absent -n demo cm dependent

    step "Namespace controller: delete namespace demo (with everything in it)"
    k delete ns demo --wait=false
    until_ok "namespace demo gone" 120 absent ns demo
    k get ns
    echo
    log "all checks passed"
fi

echo
echo "control plane up: $server (kubeconfig $admin_kc; 'source $work/env')"
echo "kube-apiserver /readyz after ${api_ready}s"
if $wait_after; then
    log "waiting; Ctrl-C or SIGTERM stops everything"
    # Return as soon as any component exits (then the trap stops the rest).
    wait -n "${pids[@]}" || true
    die "a component exited; see $work/logs"
fi
