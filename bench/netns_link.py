"""A slow link on one machine, for bench/comm_compression.py: two network namespaces joined by a
veth pair, each end rate-limited by a token bucket (tc tbf), one MPI rank (or PyTorch rank) in
each. OpenMPI runs over TCP on that link only: mpirun starts in the first namespace and starts its
daemon in the second through bench/netns_rsh.sh, with the shared-memory transport left out.
Needs root. Only the project's own namespaces are made, changed and removed."""
import os
import socket
import subprocess
import threading
import time

NS = ("ztb0", "ztb1")
IFACE = ("ztbv0", "ztbv1")
ADDR = ("10.78.0.1", "10.78.0.2")
NET = "10.78.0.0/24"
HERE = os.path.dirname(os.path.abspath(__file__))


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def teardown():
    for ns in NS:
        sh("ip", "netns", "del", ns, check=False)


def setup():
    teardown()
    for ns in NS:
        sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", IFACE[0], "type", "veth", "peer", "name", IFACE[1])
    for ns, ifc, addr in zip(NS, IFACE, ADDR):
        sh("ip", "link", "set", ifc, "netns", ns)
        sh("ip", "-n", ns, "addr", "add", addr + "/24", "dev", ifc)
        sh("ip", "-n", ns, "link", "set", ifc, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def set_rate(gbit):
    """Limits both directions to `gbit` Gbit/s (None: the veth's own speed)."""
    for ns, ifc in zip(NS, IFACE):
        sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", ifc, "root", check=False)
        if gbit:
            # A burst of 2 ms at the rate (at least 128 KiB) so the bucket refills between timer
            # ticks; packets wait at most 50 ms in the queue.
            burst = max(128 * 1024, int(gbit * 1e9 / 8 * 0.002))
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", ifc, "root", "tbf", "rate",
               f"{gbit}gbit", "burst", str(burst), "latency", "50ms")


def tx_bytes(i=0):
    r = sh("ip", "netns", "exec", NS[i], "cat", f"/sys/class/net/{IFACE[i]}/statistics/tx_bytes")
    return int(r.stdout)


def measure_gbit(seconds=2.0, port=5977):
    """The link's TCP throughput from the first namespace to the second, one stream (Gbit/s)."""
    recv = ("import socket,time\n"
            f"s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            f"s.bind(('{ADDR[1]}',{port}));s.listen(1);c,_=s.accept();n=0;t=None\n"
            "while True:\n b=c.recv(1<<20)\n if t is None:t=time.time()\n if not b:break\n n+=len(b)\n"
            "print(n*8/(time.time()-t)/1e9)\n")
    send = ("import socket,time\n"
            f"time.sleep(0.5);s=socket.create_connection(('{ADDR[1]}',{port}));b=b'x'*(1<<20)\n"
            f"t=time.time()\nwhile time.time()-t<{seconds}:s.sendall(b)\ns.close()\n")
    py = "/usr/bin/python3"
    r = subprocess.Popen(["ip", "netns", "exec", NS[1], py, "-c", recv], stdout=subprocess.PIPE,
                         text=True)
    subprocess.run(["ip", "netns", "exec", NS[0], py, "-c", send], check=True)
    out, _ = r.communicate(timeout=60)
    return float(out.strip())


def mpirun_prefix(mpirun="mpirun"):
    """The command that starts 2 ranks, one per namespace, over TCP on the link."""
    return ["ip", "netns", "exec", NS[0], mpirun, "--mca", "plm_rsh_agent",
            os.path.join(HERE, "netns_rsh.sh"), "--mca", "btl", "self,tcp",
            "--mca", "btl_tcp_if_include", NET, "--mca", "oob_tcp_if_include", NET,
            "-H", ",".join(ADDR), "-np", "2",
            # Each namespace's daemon thinks it has the machine to itself and would pin its
            # rank to core 0: both ranks on one core. The kernel places them instead.
            "--bind-to", "none"]


def in_namespace(i, cmd):
    return ["ip", "netns", "exec", NS[i]] + cmd
