# Two test hosts on this machine, for tests/dist/checks.sh and the
# benchmarks: network namespaces $a and $b joined by a veth pair (v$a,
# v$b), with addresses 10.77.0.1 and 10.77.0.2, and an rsh agent
# ($tmp/agent.sh) through which mpirun starts its daemon on a host: it
# enters the host's namespace, with the host name test-<namespace>.
# Sourced (POSIX sh), with a, b and tmp set; needs root, ip and unshare.
# netns_up returns 1 where namespaces cannot be made; netns_down removes
# them. $netns_mca: mpirun's options for TCP on those addresses only.
netns_up() {
    ip netns add "$a" 2>/dev/null || return 1
    ip netns add "$b" &&
        ip link add "v$a" type veth peer name "v$b" &&
        ip link set "v$a" netns "$a" && ip link set "v$b" netns "$b" &&
        ip -n "$a" addr add 10.77.0.1/24 dev "v$a" &&
        ip -n "$b" addr add 10.77.0.2/24 dev "v$b" &&
        ip -n "$a" link set lo up && ip -n "$b" link set lo up &&
        ip -n "$a" link set "v$a" up && ip -n "$b" link set "v$b" up || return 2
    cat >"$tmp/agent.sh" <<AGENT
#!/bin/sh
# rsh agent: HOST COMMAND... runs COMMAND on that test host
host=\$1
shift
case \$host in
10.77.0.1) ns=$a ;;
10.77.0.2) ns=$b ;;
*) echo "agent: no test host \$host" >&2; exit 1 ;;
esac
exec ip netns exec \$ns unshare --uts sh -c "hostname test-\$ns; \$*"
AGENT
    chmod +x "$tmp/agent.sh"
    netns_mca="--mca plm_rsh_agent $tmp/agent.sh --mca oob_tcp_if_include 10.77.0.0/24"
    netns_mca="$netns_mca --mca btl self,tcp --mca btl_tcp_if_include 10.77.0.0/24"
    return 0
}

netns_down() {
    ip netns del "$a" 2>/dev/null
    ip netns del "$b" 2>/dev/null
    return 0
}

# netns_mpirun N COMMAND: mpirun on host a, ranks on both hosts (at most
# 300 s)
netns_mpirun() {
    timeout 300 ip netns exec "$a" unshare --uts sh -c "hostname test-$a; mpirun --host \
        10.77.0.1,10.77.0.2 -n $1 $netns_mca sh -c '$2'"
}
