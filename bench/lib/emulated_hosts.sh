# shellcheck shell=bash
# shellcheck disable=SC2154  # prefix, rate, rate_bps and mtu are the caller's (below)
# Hosts emulated on one machine, where the network is the bottleneck as on real hosts (bench/cluster,
# tests/soak/run.sh): each host is a network namespace PREFIX-NAME whose one link (eth0) goes to a switch (the bridge
# br0 in the namespace PREFIX-sw, the port named after the host), shaped with tc's tbf in both directions (the host's
# end shapes what it sends, the switch's end what it receives), as a host with one NIC port on a switch.
# Source it after setting (globals of the caller):
#   prefix        namespace names' prefix
#   rate          tc rate of every link, each direction (e.g. 1gbit); rate_bps the same in bit/s
#   mtu           MTU of every link
# and with `die` and `warn` defined (scripts/lib/messages.sh). It keeps the namespaces it made in the array
# `namespaces`.
#   hosts_start_switch              the switch
#   hosts_add NAME ADDRESS          a host on the switch, ADDRESS/24 on its eth0, its link shaped at $rate
#   hosts_shape_link NAME RATE      both ends of NAME's link at RATE from now on (e.g. a congested link), $rate again
#                                   to restore it
#   hosts_announce NAME ADDRESS...  NAME makes itself known to the hosts at ADDRESS... (see below)
#   hosts_remove NAME               the host gone: every process in it killed (SIGKILL), its namespace and link removed
#   hosts_remove_all                every namespace made here, as hosts_remove (for the caller's cleanup)
#   in_host NAME COMMAND...         COMMAND inside host NAME
#   bits_per_second_of RATE         RATE (e.g. 1gbit) in bit/s

namespaces=()

# bits_per_second_of RATE: tc's decimal units (1gbit = 10^9 bit/s); fails when RATE is not such a rate.
bits_per_second_of() {
  [[ $1 =~ ^([0-9]+)(kbit|mbit|gbit)$ ]] || return 1
  case ${BASH_REMATCH[2]} in
    kbit) echo $((BASH_REMATCH[1] * 1000)) ;;
    mbit) echo $((BASH_REMATCH[1] * 1000000)) ;;
    gbit) echo $((BASH_REMATCH[1] * 1000000000)) ;;
  esac
}

in_host() { local host=$1; shift; ip netns exec "$prefix-$host" "$@"; }

# tbf's bucket: 4 ms of the rate (512 KB at 1gbit, as measured: iperf3 957 Mbit/s), at least 64 KiB (one GSO
# packet): a bigger bucket lets a short run beat the rate, a smaller one starves the link.
hosts_burst_bytes() { # RATE_BPS
  echo $(($1 / 8 / 250 > 65536 ? $1 / 8 / 250 : 65536))
}
# hosts_shape NAMESPACE DEV RATE RATE_BPS: tbf at RATE on what DEV sends (replacing what shaped it before). Packets
# that would wait more than 100 ms are dropped: a slower RATE is a congested link, with queueing delay and loss.
hosts_shape() {
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst "$(hosts_burst_bytes "$4")" latency 100ms ||
    die "tc could not add a tbf qdisc to $2 in $1 (does this kernel have sch_tbf?)"
}

hosts_start_switch() {
  ip netns add "$prefix-sw" || die "could not create network namespace $prefix-sw"
  namespaces+=("$prefix-sw")
  ip -n "$prefix-sw" link add br0 type bridge
  ip -n "$prefix-sw" link set br0 up
}

hosts_add() { # NAME ADDRESS
  local ns=$prefix-$1
  ip netns add "$ns" || die "could not create network namespace $ns"
  namespaces+=("$ns")
  ip link add eth0 netns "$ns" mtu "$mtu" type veth peer name "$1" netns "$prefix-sw" mtu "$mtu" ||
    die "could not create the link of $ns"
  ip -n "$prefix-sw" link set "$1" master br0 up
  ip -n "$ns" addr add "$2/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  hosts_shape "$ns" eth0 "$rate" "$rate_bps"
  hosts_shape "$prefix-sw" "$1" "$rate" "$rate_bps"
}

hosts_shape_link() { # NAME RATE: RATE as tc writes it (e.g. 50mbit)
  local bps
  bps=$(bits_per_second_of "$2") || die "hosts_shape_link: rate '$2' is not a whole number with kbit, mbit or gbit"
  hosts_shape "$prefix-$1" eth0 "$2" "$bps"
  hosts_shape "$prefix-sw" "$1" "$2" "$bps"
}

# hosts_announce NAME ADDRESS...: a host that took over a lost one's address (a new MAC) asks for each ADDRESS's
# MAC (ARP); each host asked learns NAME's new MAC from the request. Without it the others keep sending to the lost
# host's MAC until their ARP entry expires: 68 s measured here. What an operator does with `arping -U` on a real
# replacement host. A connection attempt to the discard port is enough to make the kernel ask.
hosts_announce() {
  local host=$1 address
  shift
  for address in "$@"; do
    in_host "$host" timeout 2 bash -c "exec 3<>/dev/tcp/$address/9" 2>/dev/null || true
  done
}

hosts_remove_namespace() { # NAMESPACE
  local pid
  # Whatever still runs inside goes before its namespace (a namespace with processes would stay alive unnamed).
  for pid in $(ip netns pids "$1" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  ip netns del "$1" 2>/dev/null || warn "could not remove network namespace $1"
}

hosts_remove() { # NAME
  local ns=$prefix-$1 kept=() n waited
  hosts_remove_namespace "$ns"
  # The link's switch end goes with the namespace, but not at once: a host added again under NAME needs the name.
  for waited in $(seq 50); do
    ip -n "$prefix-sw" link show "$1" >/dev/null 2>&1 || break
    [ "$waited" -lt 50 ] || warn "the switch port $1 stayed after its host was removed"
    sleep 0.1
  done
  for n in "${namespaces[@]}"; do [ "$n" = "$ns" ] || kept+=("$n"); done
  namespaces=("${kept[@]+"${kept[@]}"}")
}

hosts_remove_all() {
  local ns
  for ns in "${namespaces[@]+"${namespaces[@]}"}"; do hosts_remove_namespace "$ns"; done
  namespaces=()
}
