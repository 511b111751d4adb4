#!/usr/bin/env python3
"""Kernel memory per connection, from the kernel's own accounting.

    scripts/kernel-mem.py snapshot FILE        # before the connections open
    scripts/kernel-mem.py diff FILE N [SIDES]  # while N connections are idle

`diff` prints, per connection, the growth of the slab caches a TCP socket
uses (the socket, its inode and file, its dentry, its epoll item; read from
/proc/slabinfo, which needs root) and of TCP buffer memory
(/proc/net/sockstat "mem", in pages). SIDES (default 2) is how many sockets
each connection has on this machine: 2 when the load generator runs here
(loopback: the client's end is counted too), 1 when it runs elsewhere. The
figures are the machine's growth divided by N*SIDES, so a per-socket cost;
anything else the machine did meanwhile is in them too.
"""
import json
import os
import sys

CACHES = ("TCP", "TCPv6", "sock_inode_cache", "filp", "dentry", "eventpoll_epi",
          "eventpoll_pwq", "skbuff_head_cache", "skbuff_small_head", "kmalloc-64",
          "kmalloc-128", "kmalloc-192", "kmalloc-256", "kmalloc-512", "kmalloc-1k")


def snapshot():
    out = {"slab": {}, "tcp_mem_pages": 0, "sockets": 0}
    with open("/proc/slabinfo") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] in CACHES:
                out["slab"][parts[0]] = {"objs": int(parts[1]), "size": int(parts[3])}
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                kv = line.split()[1:]
                d = dict(zip(kv[::2], kv[1::2]))
                out["tcp_mem_pages"] = int(d.get("mem", 0))
                out["sockets"] = int(d.get("inuse", 0))
    return out


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("snapshot", "diff"):
        sys.exit(__doc__)
    if sys.argv[1] == "snapshot":
        with open(sys.argv[2], "w") as f:
            json.dump(snapshot(), f)
        return
    before = json.load(open(sys.argv[2]))
    n = int(sys.argv[3])
    sides = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    now = snapshot()
    per = n * sides
    total = 0.0
    print(f"{n} connections, {sides} socket(s) each on this machine; growth per socket:")
    for name, cur in now["slab"].items():
        old = before["slab"].get(name, {"objs": 0})
        d = (cur["objs"] - old["objs"]) * cur["size"] / per
        if abs(d) >= 1:
            print(f"  {name:20s} {d:8.0f} B  ({(cur['objs'] - old['objs']) / per:+.2f} objects of {cur['size']} B)")
            total += d
    page = os.sysconf("SC_PAGE_SIZE")
    buf = (now["tcp_mem_pages"] - before["tcp_mem_pages"]) * page / per
    print(f"  {'TCP buffers':20s} {buf:8.0f} B")
    total += buf
    print(f"  {'total':20s} {total:8.0f} B per socket; TCP sockets in use {before['sockets']} -> {now['sockets']}")


main()
