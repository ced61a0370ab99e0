#!/usr/bin/env bash
# Attaches a worker to blockps shards with the kernel initiator (open-iscsi) and writes the cluster file that
# libblockps, the blockps CLI and Python read.
#
#   scripts/attach.sh [--transport iser|tcp] SHARDS... --out CLUSTER.toml [--dry-run] [--status-json FILE]...
#   scripts/attach.sh [--transport iser|tcp] SHARDS... --logout [--dry-run]
#   e.g. scripts/attach.sh --transport iser --conf configs/shard0.conf --conf configs/shard1.conf --out cluster.toml
#
# SHARDS, in shard order (the order is the stripe order of the model: keep it the same on every worker):
#   --conf FILE          a shard config (configs/shardN.conf): portal from its `blockps-portal` line (plus
#                        BLOCKPS_PORT_OFFSET, and with its address replaced by BLOCKPS_PORTAL_ADDR when set,
#                        as ps-up.sh does), IQN from its <target ...> (over iSER: IQN-iser, the target ps-up.sh
#                        adds for `blockps-iser`), and the LUN of each role: 1 grad, 2 weights, 3 status
#                        of its `blockps-shard` line, or the lun of each <backing-store> by its bsopts
#                        role=grad/weights/status. Shard name: the file name without .conf.
#   --portal HOST:PORT   a shard's portal; its target is found by discovery (exactly one target must be
#                        listed there; over TCP the IQN-iser targets of ps-up.sh are not counted) unless
#                        --target IQN follows. LUNs 1 grad, 2 weights, 3 status (our
#                        configs' numbering). Shard name: the IQN's part after its last ':'.
#   --target IQN         the IQN of the shard named by the --portal just before it (needed with --dry-run).
# OPTIONS
#   --transport iser|tcp  the open-iscsi iface: `iser` (iSCSI over RDMA) or `default` (TCP). Default: tcp.
#                        iSER to tgt needs BOTH an address ACL and an initiator-name ACL on the target
#                        (`initiator-address` and `initiator-name` in the conf); TCP needs one.
#   --out FILE           the cluster file to write (TOML; overwritten). Required unless --logout.
#   --logout             log out of the shards' targets instead (their /dev devices go away) and delete their
#                        node records (a later attach starts clean); no cluster file.
#   --dry-run            run nothing: print every command it would run (`+ CMD`) and the cluster file it would
#                        write. Needs each shard's IQN (--conf, or --target) and its status page (--status-json).
#   --status-json FILE   a shard's status page (what its status LU reads as, JSON) instead of reading the
#                        status device; give one per shard, in shard order. The model fields come from it.
#   --timeout S          seconds to wait for the devices to appear (default 60).
#   -h, --help           this text.
#
# What it does: `mkdir -p /run/lock/iscsi` (iscsiadm needs it without systemd), starts iscsid if none runs;
# discovery of every shard `iscsiadm -m discovery -t st -p HOST:PORT -I IFACE -o new` before any login (an
# iSER discovery next to a live session can fail; a failed one is tried 3 times; `-o new`: a discovery of
# the same portal with another iface must not delete the first one's records); then per shard login
# `iscsiadm -m node -T IQN -p HOST:PORT -I IFACE --login` (an existing session is fine), `udevadm settle`, then waits for
# /dev/disk/by-path/ip-HOST:PORT-iscsi-IQN-lun-N of each LU. When the kernel attaches a LU it reads its first
# blocks to look for partition tables: the bytes of a weights LU can look like one (a bogus Atari/AHDI table
# was seen), so it drops whatever partitions the kernel made with `partx -d` on each LU's device (those reads
# were pulls; nothing was written). It reads each shard's status page from its status device (`dd
# iflag=direct`), takes shard.size, shard.dtype, shard.block from the JSON (`blockps status --page - --field
# /shard/size ...`), checks that all shards agree on dtype and block, and writes:
#   [model]   size = SUM OF THE SHARD SIZES, dtype, block       [layout] kind = "stripe"
#   [[shard]] name, grad, weights, status = /dev/disk/by-path/... (one per shard, in order)
# Open the devices with O_DIRECT only: through the page cache a read after a push returns your own gradient.
# Exit status: 0, or 2 with `attach: ERROR: reason` (nothing is logged out on a failure: run --logout).
# Environment: BLOCKPS_PORT_OFFSET (default 0) is added to the port of --conf files (as ps-up.sh does);
# BLOCKPS_PORTAL_ADDR (IPv4) replaces their address (as ps-up.sh does: iSER needs an RDMA device's address);
# BLOCKPS_CLI: the blockps CLI that reads the --conf files and the status pages (default: the build's beside
# BLOCKPS_BACKING_STORE_DIR, the installed one, PATH's, this tree's build/; scripts/lib/blockps-tgt.sh).
set -euo pipefail

blockps_prog=attach blockps_die_status=2 blockps_say_stderr=1
# shellcheck source=scripts/lib/blockps-tgt.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/blockps-tgt.sh"
check_portal_environment

transport=tcp
out=''
logout=''
dry=''
timeout_s=60
names=() hosts=() ports=() iqns=() lgrad=() lweights=() lstatus=() status_files=() conf_iqn=()

add_portal() { # HOST:PORT
  [[ $1 =~ ^([A-Za-z0-9._-]+):([0-9]+)$ ]] || die "--portal '$1': expected HOST:PORT (IPv4 address or host name)"
  local port=${BASH_REMATCH[2]}
  if [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then die "--portal '$1': port out of range 1..65535"; fi
  hosts+=("${BASH_REMATCH[1]}") ports+=("$port") iqns+=("") names+=("")
  conf_iqn+=(0)
  lgrad+=(1) lweights+=(2) lstatus+=(3)
}
add_conf() { # FILE
  if [ ! -f "$1" ] || [ ! -r "$1" ]; then die "--conf '$1': no such file (or not readable)"; fi
  local f
  # "PORTAL IQN GRAD_LUN WEIGHTS_LUN STATUS_LUN" of the file as tgt-admin reads it (its blockps-shard line made
  # into its LUs); a wrong line, not exactly one blockps-portal line or <target>, or a role without an LU dies.
  f=$(blockps_conf "--conf " shard "$1") || exit
  read -r portal iqn g w s <<<"$f"
  [[ $portal =~ ^([A-Za-z0-9._-]+):([0-9]+)$ ]] || die "--conf $1: blockps-portal '$portal' is not HOST:PORT"
  local port=$((BASH_REMATCH[2] + BLOCKPS_PORT_OFFSET))
  if [ "$port" -gt 65535 ]; then die "--conf $1: port $port (with BLOCKPS_PORT_OFFSET) out of range"; fi
  hosts+=("${BLOCKPS_PORTAL_ADDR:-${BASH_REMATCH[1]}}") ports+=("$port") iqns+=("$iqn") names+=("$(basename "$1" .conf)")
  conf_iqn+=(1)
  lgrad+=("$g") lweights+=("$w") lstatus+=("$s")
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help) usage 0 ;;
    --transport | --portal | --target | --conf | --out | --status-json | --timeout)
      if [ "$#" -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value (--help for usage)"; fi
      case "$1" in
        --transport)
          case "$2" in iser | tcp) transport=$2 ;; *) die "--transport '$2': must be iser or tcp" ;; esac ;;
        --portal) add_portal "$2" ;;
        --target)
          [ "${#hosts[@]}" -gt 0 ] || die "--target $2: give it after the --portal it belongs to"
          [ -z "${iqns[-1]}" ] || die "--target $2: the shard before it already has its IQN (${iqns[-1]})"
          [[ $2 =~ ^(iqn\.[0-9]{4}-[0-9]{2}\.[^[:space:]]+|eui\.[0-9A-Fa-f]{16})$ ]] || die "--target '$2': not an iSCSI name (iqn.YYYY-MM.domain:name)"
          iqns[-1]=$2
          ;;
        --conf) add_conf "$2" ;;
        --out) out=$2 ;;
        --status-json)
          if [ ! -f "$2" ] || [ ! -r "$2" ]; then die "--status-json '$2': no such file (or not readable)"; fi
          status_files+=("$2")
          ;;
        --timeout)
          [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--timeout '$2': must be a whole number of seconds >= 1"
          timeout_s=$2
          ;;
      esac
      shift 2
      ;;
    --logout) logout=1; shift ;;
    --dry-run) dry=1; shift ;;
    *) die "unknown argument '$1' (--help for usage)" ;;
  esac
done

nshards=${#hosts[@]}
[ "$nshards" -gt 0 ] || die "no shards given: --conf FILE or --portal HOST:PORT, once per shard"
if [ -n "$logout" ]; then
  [ -z "$out" ] || die "--logout writes no cluster file: drop --out"
  [ "${#status_files[@]}" -eq 0 ] || die "--logout reads no status page: drop --status-json"
else
  [ -n "$out" ] || die "--out CLUSTER.toml is required (where to write the cluster file)"
  if [ "${#status_files[@]}" -ne 0 ] && [ "${#status_files[@]}" -ne "$nshards" ]; then
    die "--status-json given ${#status_files[@]} times for $nshards shards: give one per shard, in shard order"
  fi
  if [ -n "$dry" ] && [ "${#status_files[@]}" -eq 0 ]; then
    die "--dry-run cannot read the status LUs: give --status-json FILE per shard (the model fields come from it)"
  fi
fi
if [ -n "$dry" ]; then
  for i in "${!hosts[@]}"; do
    [ -n "${iqns[$i]}" ] || die "--dry-run needs the IQN of shard $((i + 1)) (${hosts[$i]}:${ports[$i]}): --target IQN after its --portal, or --conf"
  done
fi
for i in "${!hosts[@]}"; do
  for ((j = 0; j < i; j++)); do
    if [ "${hosts[$j]}:${ports[$j]}" = "${hosts[$i]}:${ports[$i]}" ] && [ "${iqns[$j]}" = "${iqns[$i]}" ]; then
      die "shard $((i + 1)) (${hosts[$i]}:${ports[$i]} ${iqns[$i]:-?}) is given twice"
    fi
  done
done
iface=default
[ "$transport" = tcp ] || iface=iser
# Over iSER a --conf shard is reached through the iSER copy of its target.
if [ "$transport" = iser ]; then
  for i in "${!iqns[@]}"; do
    [ "${conf_iqn[$i]}" = 0 ] || iqns[i]=${iqns[$i]}$BLOCKPS_ISER_SUFFIX
  done
fi

# run CMD...: runs it, or prints it in a dry run.
run() {
  if [ -n "$dry" ]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

if [ -z "$dry" ]; then
  [ "$(id -u)" = 0 ] || die "run as root (iscsiadm logs in for the whole host); --dry-run shows what it would do"
  export PATH=$PATH:/usr/sbin:/sbin
  command -v iscsiadm >/dev/null || die "iscsiadm not found: apt-get install open-iscsi"
  if [ -z "$logout" ]; then
    command -v udevadm >/dev/null || die "udevadm not found (udev makes /dev/disk/by-path)"
    command -v partx >/dev/null || die "partx not found: apt-get install util-linux"
  fi
  if [ "$transport" = iser ] && [ -z "$logout" ] && [ ! -d /sys/class/infiniband ]; then
    say "warning: no RDMA device (/sys/class/infiniband is missing): the iSER login will fail"
  fi
fi

# The address as the kernel reports it in by-path names (an IP address).
portal_ip() { # HOST
  if [[ $1 =~ ^[0-9]+(\.[0-9]+){3}$ ]] || [ -n "$dry" ]; then
    echo "$1"
  else
    getent ahostsv4 "$1" | awk 'NR == 1 { print $1 }' | grep . || die "cannot resolve host '$1'"
  fi
}

run mkdir -p /run/lock/iscsi
if [ -n "$dry" ]; then
  echo "+ iscsid   # only when no iscsid runs (pgrep -x iscsid)"
elif ! pgrep -x iscsid >/dev/null; then
  iscsid || die "iscsid would not start"
  sleep 1
fi

# --- log out -----------------------------------------------------------------------------------------------
if [ -n "$logout" ]; then
  for i in "${!hosts[@]}"; do
    portal=${hosts[$i]}:${ports[$i]}
    if [ -z "${iqns[$i]}" ]; then
      run iscsiadm -m node -p "$portal" -I "$iface" --logout || say "warning: logout of $portal failed (not logged in?)"
    else
      run iscsiadm -m node -T "${iqns[$i]}" -p "$portal" -I "$iface" --logout ||
        say "warning: logout of ${iqns[$i]} at $portal failed (not logged in?)"
      run iscsiadm -m node -T "${iqns[$i]}" -p "$portal" -I "$iface" -o delete ||
        say "warning: no node record of ${iqns[$i]} at $portal to delete"
    fi
  done
  exit 0
fi

# --- discovery: every portal before any login ------------------------------------------------------------------
# Over iSER, iscsiadm runs SendTargets through the kernel's netlink interface, and events of a session that is
# already logged in can cut into it ("recv's end state machine bug?" then "iSCSI PDU timed out", seen when a
# second shard was discovered right after the first one's login). So all discoveries come first, and a failed
# one is tried again: a discovery changes nothing on the target.
discovery_attempts=3
discover() { # PORTAL -> the SendTargets listing on stdout
  local attempt out
  for ((attempt = 1; ; attempt++)); do
    out=$(iscsiadm -m discovery -t st -p "$1" -I "$iface" -o new 2>&1) && { printf '%s\n' "$out"; return 0; }
    [ "$attempt" -lt "$discovery_attempts" ] ||
      die "discovery at $1 over $transport failed $discovery_attempts times; the last said: $out"
    say "warning: discovery at $1 over $transport failed (attempt $attempt of $discovery_attempts), trying again: $out"
    sleep 2
  done
}

for i in "${!hosts[@]}"; do
  portal=${hosts[$i]}:${ports[$i]}
  if [ -n "$dry" ]; then
    run iscsiadm -m discovery -t st -p "$portal" -I "$iface" -o new
  else
    disc=$(discover "$portal")
    # A TCP discovery also records the iSER copies of the targets (for the TCP iface, where tgt refuses them):
    # drop those records, or they outlive the logout.
    if [ "$transport" = tcp ]; then
      while read -r t; do
        iscsiadm -m node -T "$t" -p "$portal" -I "$iface" -o delete >/dev/null 2>&1 || true
      done < <(awk -v sfx="$BLOCKPS_ISER_SUFFIX" 'substr($2, length($2) - length(sfx) + 1) == sfx { print $2 }' <<<"$disc" | sort -u)
    fi
    if [ -z "${iqns[$i]}" ]; then
      # A TCP discovery also lists the iSER copies of the targets (tgt does not filter by transport).
      mapfile -t found < <(awk -v t="$transport" -v sfx="$BLOCKPS_ISER_SUFFIX" '
        t == "tcp" && substr($2, length($2) - length(sfx) + 1) == sfx { next } { print $2 }' <<<"$disc" | sort -u)
      [ "${#found[@]}" -eq 1 ] || die "discovery at $portal lists ${#found[@]} targets (${found[*]}): name one with --target IQN"
      iqns[i]=${found[0]}
    elif ! awk '{ print $2 }' <<<"$disc" | grep -qxF "${iqns[$i]}"; then
      die "discovery at $portal does not list ${iqns[$i]} (it lists: $(awk '{ print $2 }' <<<"$disc" | tr '\n' ' '))"
    fi
  fi
  [ -n "${names[$i]}" ] || names[i]=${iqns[$i]##*:}
done

# --- log in ----------------------------------------------------------------------------------------------------
for i in "${!hosts[@]}"; do
  portal=${hosts[$i]}:${ports[$i]}
  rc=0
  run iscsiadm -m node -T "${iqns[$i]}" -p "$portal" -I "$iface" --login || rc=$?
  # 15: a session exists already (attach.sh run twice): fine.
  [ "$rc" -eq 0 ] || [ "$rc" -eq 15 ] || die "login to ${iqns[$i]} at $portal over $transport failed (iscsiadm exit $rc)"
done

for i in "${!names[@]}"; do
  for ((j = 0; j < i; j++)); do
    [ "${names[$j]}" != "${names[$i]}" ] || die "two shards are named ${names[$i]} (names come from the conf file names or IQNs)"
  done
done

# --- devices -------------------------------------------------------------------------------------------------
run udevadm settle -t 30
declare -a dgrad dweights dstatus
for i in "${!hosts[@]}"; do
  base=/dev/disk/by-path/ip-$(portal_ip "${hosts[$i]}"):${ports[$i]}-iscsi-${iqns[$i]}-lun-
  dgrad[i]=$base${lgrad[$i]} dweights[i]=$base${lweights[$i]} dstatus[i]=$base${lstatus[$i]}
done
if [ -n "$dry" ]; then
  for i in "${!hosts[@]}"; do
    for d in "${dgrad[$i]}" "${dweights[$i]}" "${dstatus[$i]}"; do
      echo "+ wait for $d (up to ${timeout_s}s)"
      run partx -d "$d"
    done
  done
else
  deadline=$((SECONDS + timeout_s))
  for i in "${!hosts[@]}"; do
    for d in "${dgrad[$i]}" "${dweights[$i]}" "${dstatus[$i]}"; do
      until [ -b "$d" ]; do
        [ "$SECONDS" -lt "$deadline" ] ||
          die "$d did not appear within ${timeout_s}s (iscsiadm -m session -P 3 shows what the kernel attached)"
        sleep 0.5
      done
      # Bogus partitions from the kernel's partition scan of weight bytes: drop them.
      partx -d "$d" >/dev/null 2>&1 || true
    done
  done
fi

# --- model fields from the status pages ----------------------------------------------------------------------
human_bytes() { # N: 32M, 256K, or the plain number
  local n=$1 s
  for s in T G M K; do
    local unit
    case $s in T) unit=$((1 << 40)) ;; G) unit=$((1 << 30)) ;; M) unit=$((1 << 20)) ;; K) unit=$((1 << 10)) ;; esac
    if [ "$n" -ge "$unit" ] && [ $((n % unit)) -eq 0 ]; then
      echo "$((n / unit))$s"
      return
    fi
  done
  echo "$n"
}

cli=$(blockps_cli) || exit
total=0 dtype='' block='' first=''
for i in "${!hosts[@]}"; do
  if [ "${#status_files[@]}" -gt 0 ]; then
    src=${status_files[$i]}
    page=$(tr -d '\0' <"$src")
  else
    src=${dstatus[$i]}
    page=$(dd if="$src" bs=64K count=1 iflag=direct status=none | tr -d '\0') || die "cannot read the status page of ${names[$i]} from $src"
  fi
  # The model fields by their pointers in contract/status_page.h, tab-separated.
  fields=$("$cli" status --page - --field /shard/size --field /shard/dtype --field /shard/block 2>&1 <<<"$page") ||
    die "${names[$i]}: the status page ($src) has no shard.size, shard.dtype and shard.block (is this a blockps" \
      "status LU?): ${fields#blockps: ERROR: }"
  IFS=$'\t' read -r size dt bl <<<"$fields"
  [[ $size =~ ^[1-9][0-9]*$ ]] || die "${names[$i]}: shard.size '$size' in $src is not a byte count"
  [[ $bl =~ ^[1-9][0-9]*$ ]] || die "${names[$i]}: shard.block '$bl' in $src is not a byte count"
  case "$dt" in f32 | bf16 | f16) ;; *) die "${names[$i]}: shard.dtype '$dt' in $src is not f32, bf16 or f16" ;; esac
  if [ -z "$first" ]; then
    first=${names[$i]} dtype=$dt block=$bl
  else
    [ "$dt" = "$dtype" ] || die "shards disagree on dtype: $first has $dtype, ${names[$i]} has $dt"
    [ "$bl" = "$block" ] || die "shards disagree on block: $first has $block, ${names[$i]} has $bl"
  fi
  total=$((total + size))
done

# --- the cluster file ------------------------------------------------------------------------------------------
toml=$(
  echo "# Written by scripts/attach.sh --transport $transport on $(date -u '+%F %T') UTC."
  echo "# Devices of the kernel initiator: open them with O_DIRECT only (a read through the page cache after a"
  echo "# push returns your own gradient, not the weights)."
  echo "[model]"
  echo "size = \"$(human_bytes "$total")\""
  echo "dtype = \"$dtype\""
  echo "block = \"$(human_bytes "$block")\""
  echo
  echo "[layout]"
  echo "kind = \"stripe\""
  for i in "${!hosts[@]}"; do
    echo
    echo "[[shard]]"
    echo "name = \"${names[$i]}\""
    echo "grad = \"${dgrad[$i]}\""
    echo "weights = \"${dweights[$i]}\""
    echo "status = \"${dstatus[$i]}\""
  done
)
if [ -n "$dry" ]; then
  echo "# would write $out:"
  echo "$toml"
else
  tmpout=$(mktemp "$(dirname "$out")/.attach-XXXXXX") || die "cannot write in the directory of $out"
  echo "$toml" >"$tmpout"
  mv -f "$tmpout" "$out"
  say "wrote $out ($nshards shards, model $(human_bytes "$total") $dtype, block $(human_bytes "$block"))"
fi
