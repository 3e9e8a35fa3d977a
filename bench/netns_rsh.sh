#!/bin/sh
# The "rsh" mpirun uses to start its daemons when the hosts are network namespaces of this
# machine (bench/netns_link.py): the host is an address, and the daemon starts in the namespace
# that holds it. mpirun's own options before the host (-x and the like) are skipped.
while [ "${1#-}" != "$1" ]; do shift; done
host=$1
shift
for ns in $(ip netns list | cut -d' ' -f1); do
    if ip -n "$ns" -4 addr show | grep -q "inet $host/"; then
        exec ip netns exec "$ns" sh -c "$*"
    fi
done
echo "netns_rsh: no network namespace holds $host" >&2
exit 1
